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
