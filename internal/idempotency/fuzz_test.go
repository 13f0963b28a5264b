package idempotency

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseKey checks ParseKey on any header value: it accepts exactly the
// keys of 1 to MaxKeyLen visible ASCII characters (optionally quoted, with
// no quote or backslash inside), returns them unquoted, and fails with
// ErrInvalidKey otherwise. An accepted key parses to itself again.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `""`, `"`, `"a\"b"`, "has space", "tab\there", "caf\u00e9", "nul\x00", strings.Repeat("k", 255), strings.Repeat("k", 256), `"` + strings.Repeat("k", 255) + `"`, "\x7f", "~!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		k, err := ParseKey(header)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ParseKey(%q): error %v does not match ErrInvalidKey", header, err)
			}
			return
		}
		if len(k) < 1 || len(k) > MaxKeyLen {
			t.Fatalf("ParseKey(%q) accepted %d characters", header, len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x21 || k[i] > 0x7e {
				t.Fatalf("ParseKey(%q) accepted byte %#x", header, k[i])
			}
		}
		if k != header && `"`+k+`"` != header {
			t.Fatalf("ParseKey(%q) = %q, neither the value nor its unquoted form", header, k)
		}
		if k2, err := ParseKey(k); err != nil && !strings.ContainsAny(k, `"`) {
			t.Fatalf("ParseKey(%q) accepted %q, which then fails: %v", header, k, err)
		} else if err == nil && k2 != k && !strings.HasPrefix(k, `"`) {
			t.Fatalf("ParseKey is not stable on %q: %q", k, k2)
		}
	})
}
