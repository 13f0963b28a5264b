package idempotency

import (
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	good := map[string]string{
		`abc`:                    "abc",
		`"8e03978e-40d5-43e8"`:   "8e03978e-40d5-43e8",
		strings.Repeat("k", 255): strings.Repeat("k", 255),
		`a!~z`:                   "a!~z",
		`"` + `x` + `"`:          "x",
	}
	for in, want := range good {
		got, err := ParseKey(in)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", `""`, strings.Repeat("k", 256), "has space", "tab\there", "caf\u00e9", "nul\x00", `"a\"b"`} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted a bad key", bad)
		}
	}
}

func TestRecordKeysDoNotCollide(t *testing.T) {
	s := New(nil, Options{})
	a := s.recordKey("u:1", "/p", "k")
	b := s.recordKey("u", ":1/p", "k")
	if a == b {
		t.Fatal("scopes that concatenate alike must not share a record")
	}
}

// TestHashesAreStable pins the fingerprint and the record key to digests
// computed outside Go (printf ... | sha256sum). Records outlive deploys: a
// change in the bytes hashed would orphan every stored answer, and a retry
// across the deploy would run again.
func TestHashesAreStable(t *testing.T) {
	s := New(nil, Options{Prefix: "idem:"})
	for _, c := range []struct{ got, want string }{
		{Fingerprint("POST", "/api/v1/products/1/buy", []byte(`{"user_id":"alice"}`)), "cfbb46cdeb1ae67e5050d9520518114d22fae56f5f3acbc55277064df0c31e35"},
		{Fingerprint("GET", "", nil), "69a1c0c62ded40647e890ec85d203bbd3523f23e026dcab1b0d5d769bd554d9a"},
		{s.recordKey("alice", "/api/v1/products/1/buy", "key-001"), "idem:da41b0eb18a5d27a8b72d62d0737e867b9c72e0e7b224b99687c7e76a98b0998"},
	} {
		if c.got != c.want {
			t.Errorf("digest %s, want %s", c.got, c.want)
		}
	}
}
