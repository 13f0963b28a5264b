package scenario

import (
	"encoding/json"
	"testing"
)

// TestProblemTypeReadsAsJSONDoes: the short cut for the server's problems
// gives what decoding the whole body gives, and bodies it does not fit
// (type not first, an escape in it, not JSON) are decoded in full.
func TestProblemTypeReadsAsJSONDoes(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"type":"/problems/sold-out","title":"Sold out","status":409}`, "/problems/sold-out"},
		{`{"title":"Sold out","type":"/problems/sold-out"}`, "/problems/sold-out"},
		{`{"type":"/problems/a\"b","status":409}`, `/problems/a"b`},
		{`{"type":"/problems/\u0073old-out"}`, "/problems/sold-out"},
		{`not json`, ""},
		{``, ""},
	} {
		if got := problemType([]byte(c.body)); got != c.want {
			t.Errorf("problemType(%s) = %q, want %q", c.body, got, c.want)
		}
	}
}

// TestBodyIsTheBuyersJSON: a buy's body and a grab's decode to the user id
// they were built with, escapes included, and a grab has no quantity.
func TestBodyIsTheBuyersJSON(t *testing.T) {
	for _, user := range []string{"lab-1-42", `odd "user" \ é`} {
		for _, sc := range []Scenario{{Name: "buy"}, {Name: "grab", Coupon: true}} {
			var got map[string]any
			if err := json.Unmarshal(sc.Body(user), &got); err != nil {
				t.Fatalf("%s body for %q: %v (%s)", sc.Name, user, err, sc.Body(user))
			}
			want := map[string]any{"user_id": user, "quantity": float64(1)}
			if sc.Coupon {
				delete(want, "quantity")
			}
			if len(got) != len(want) || got["user_id"] != want["user_id"] || got["quantity"] != want["quantity"] {
				t.Errorf("%s body for %q decodes to %v, want %v", sc.Name, user, got, want)
			}
		}
	}
}
