package httpapi

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/api"
)

// awkward holds strings that encoding/json escapes: quotes, backslashes,
// every kind of control character, HTML, U+2028 and U+2029, invalid UTF-8.
var awkward = []string{
	"", "plain", `a "quoted" \ back\slash`, "\b\f\n\r\t\x00\x01\x1f\x7f",
	"<script>&amp;</script>", "line\u2028sep\u2029para", "caf\u00e9 \u79d2\u6740 \U0001F6D2",
	"\xff\xfe broken \xc3", "\xed\xa0\x80 surrogate", "/api/v1/products/1/buy",
}

// randomString mixes ASCII, multibyte runes and raw bytes.
func randomString(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(24) {
		switch r.IntN(4) {
		case 0:
			b.WriteByte(byte(r.IntN(0x80)))
		case 1:
			b.WriteByte(byte(r.IntN(0x100)))
		case 2:
			b.WriteRune(rune(r.IntN(0x3000)))
		default:
			b.WriteString(awkward[r.IntN(len(awkward))])
		}
	}
	return b.String()
}

// TestAppendProblemWritesWhatEncodingJSONWrites: for fixed awkward strings
// and 20,000 random ones in every field, appendProblem's bytes equal
// jsonEncode's, empty detail and instance left out as omitempty leaves
// them out.
func TestAppendProblemWritesWhatEncodingJSONWrites(t *testing.T) {
	check := func(p api.Problem) {
		t.Helper()
		var want bytes.Buffer
		if err := jsonEncode(&want, p); err != nil {
			t.Fatal(err)
		}
		if got := appendProblem(nil, p); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("appendProblem(%#v)\n got %q\nwant %q", p, got, want.Bytes())
		}
	}
	for _, s := range awkward {
		check(api.Problem{Type: s, Title: s, Status: 409, Detail: s, Instance: s})
	}
	r := rand.New(rand.NewPCG(29, 1))
	for range 20_000 {
		check(api.Problem{Type: randomString(r), Title: randomString(r), Status: r.IntN(600) - 50, Detail: randomString(r), Instance: randomString(r)})
	}
}

// TestPlainBuyReadsWhatDecodeBodyReads: every body plainBuy accepts,
// decodeBody accepts too, with the same user and quantity; the common
// bodies are accepted (so the fast path is taken); and of 50,000 random
// mutations of them, those plainBuy accepts decode the same way.
func TestPlainBuyReadsWhatDecodeBodyReads(t *testing.T) {
	agree := func(body string) bool {
		t.Helper()
		got, ok := plainBuy([]byte(body))
		if !ok {
			return false
		}
		var want buyBody
		if err := decodeBody([]byte(body), &want); err != nil {
			t.Fatalf("plainBuy read %q, which decodeBody refuses: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: plainBuy read %s, decodeBody %s", body, show(got), show(want))
		}
		return true
	}
	common := []string{
		`{"user_id":"u-1","quantity":1}`, `{"quantity":2,"user_id":"wrk-1-77"}`, `{"user_id":"late-9"}`,
		" {\n\t\"user_id\" : \"u 2\" ,\r\n \"quantity\" : -0 } \n", `{"user_id":"","quantity":0}`,
		`{"user_id":"x","quantity":-3}`, `{"user_id":"x","quantity":999999999}`,
	}
	for _, b := range common {
		if !agree(b) {
			t.Errorf("plainBuy left %q to decodeBody: the common body must take the fast path", b)
		}
	}
	// Bodies plainBuy must leave to decodeBody (which accepts some, refuses others).
	for _, b := range []string{
		`{}`, `{"user_id":"a","user_id":"b"}`, `{"USER_ID":"a"}`, `{"user_id":"a\"b"}`, `{"user_id":"caf` + "\u00e9" + `"}`,
		`{"user_id":"a","quantity":1.0}`, `{"user_id":"a","quantity":1e2}`, `{"user_id":"a","quantity":01}`,
		`{"user_id":"a","quantity":1234567890}`, `{"user_id":"a",}`, `{"user_id":null}`, `{"user_id":"a","extra":1}`,
		`{"user_id":"a"}{}`, `{"user_id":"a"} x`, `["user_id"]`, `{"user_id":"a","quantity":"1"}`, `{"user_id":"a"`, ``,
		"{\"user_id\":\"a\x00\"}", `{"user_id":"a","quantity":-}`,
	} {
		if _, ok := plainBuy([]byte(b)); ok {
			t.Errorf("plainBuy read %q: it must leave it to decodeBody", b)
		}
	}
	r := rand.New(rand.NewPCG(29, 2))
	const alphabet = "{}[]\":,-.0123456789eE \t\n\\aquser_idntity\x00\xc3\xa9"
	taken := 0
	for range 50_000 {
		b := []byte(common[r.IntN(len(common))])
		for range 1 + r.IntN(3) {
			i := r.IntN(len(b) + 1)
			switch r.IntN(3) {
			case 0: // insert
				b = append(b[:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, b[i:]...)...)
			case 1: // delete
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			default: // replace
				if i < len(b) {
					b[i] = alphabet[r.IntN(len(alphabet))]
				}
			}
		}
		if agree(string(b)) {
			taken++
		}
	}
	t.Logf("%d of 50000 mutated bodies took the fast path", taken)
	if taken == 0 {
		t.Error("no mutated body took the fast path: the comparison proved nothing")
	}
}

func show(b buyBody) string {
	user, qty := "<nil>", "<nil>"
	if b.UserID != nil {
		user = fmt.Sprintf("%q", *b.UserID)
	}
	if b.Quantity != nil {
		qty = fmt.Sprint(*b.Quantity)
	}
	return "user " + user + ", quantity " + qty
}
