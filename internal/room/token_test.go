package room

import (
	"errors"
	"strings"
	"testing"
)

func signer(t *testing.T, spec string) *Signer {
	t.Helper()
	keys, err := ParseKeys(spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(keys)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTokenRoundTrip(t *testing.T) {
	s := signer(t, "k1:0123456789abcdef0123")
	in := Token{Kind: KindPass, Early: true, Item: 7, Epoch: 1765000000000, Place: 812, At: 1765000001000, Expires: 1765000031000, Buyer: "用户-1"}
	got, err := s.Verify(s.Sign(in), KindPass)
	if err != nil || got != in {
		t.Fatalf("Verify(Sign(%+v)) = %+v, %v", in, got, err)
	}
}

// A token changed in any byte, signed by an unknown key, or of the other
// kind is refused with its own error.
func TestTokenForgedAndMalformed(t *testing.T) {
	s := signer(t, "k1:0123456789abcdef0123")
	other := signer(t, "k1:ffffffffffffffffffff")
	tok := s.Sign(Token{Kind: KindTicket, Item: 1, Epoch: 2, Place: 3, At: 4, Buyer: "alice"})
	parts := strings.Split(tok, ".")
	bob := s.Sign(Token{Kind: KindTicket, Item: 1, Epoch: 2, Place: 3, At: 4, Buyer: "bob"})
	cases := map[string]struct {
		tok  string
		want error
	}{
		"other secret":     {other.Sign(Token{Kind: KindTicket, Item: 1, Buyer: "alice"}), ErrForged},
		"payload swapped":  {parts[0] + "." + parts[1] + "." + strings.Split(bob, ".")[2] + "." + parts[3], ErrForged},
		"unknown key id":   {parts[0] + ".k9." + parts[2] + "." + parts[3], ErrForged},
		"not a token":      {"hello", ErrMalformed},
		"bad mac encoding": {parts[0] + "." + parts[1] + "." + parts[2] + ".!!", ErrMalformed},
		"other kind":       {s.Sign(Token{Kind: KindPass, Item: 1, Buyer: "alice"}), ErrMalformed},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Verify(c.tok, KindTicket); !errors.Is(err, c.want) {
				t.Fatalf("Verify = %v, want %v", err, c.want)
			}
		})
	}
}

// Rotation: a fleet adds the new key second (both verify, the old signs),
// then first (the new signs, old tokens still verify), then drops the old
// (its tokens are refused).
func TestKeyRotation(t *testing.T) {
	old := signer(t, "old:0123456789abcdef0123")
	both := signer(t, "new:fedcba98765432100123,old:0123456789abcdef0123")
	onlyNew := signer(t, "new:fedcba98765432100123")
	tok := Token{Kind: KindTicket, Item: 1, Buyer: "alice"}
	fromOld, fromBoth := old.Sign(tok), both.Sign(tok)
	if !strings.HasPrefix(fromBoth, "r1.new.") {
		t.Fatalf("the first key does not sign: %s", fromBoth)
	}
	if _, err := both.Verify(fromOld, KindTicket); err != nil {
		t.Fatalf("a token of the old key, during the rotation: %v", err)
	}
	if _, err := onlyNew.Verify(fromBoth, KindTicket); err != nil {
		t.Fatalf("a token of the new key, after the rotation: %v", err)
	}
	if _, err := onlyNew.Verify(fromOld, KindTicket); !errors.Is(err, ErrForged) {
		t.Fatalf("a token of the dropped key: %v, want ErrForged", err)
	}
}

func TestParseKeysRefusesBadKeys(t *testing.T) {
	for _, spec := range []string{"", "k1", "k1:short", "k 1:0123456789abcdef0123", "k1:0123456789abcdef0123,k1:0123456789abcdef0123"} {
		if _, err := ParseKeys(spec); err == nil {
			t.Errorf("ParseKeys(%q) accepted", spec)
		}
	}
}

func TestPermutationIsAPermutationAndTheSameEverywhere(t *testing.T) {
	a, b := permutation(1000, 42), permutation(1000, 42)
	seen := make([]bool, 1001)
	moved := 0
	for i, p := range a {
		if p != b[i] {
			t.Fatalf("two draws with one seed differ at %d", i)
		}
		if p < 1 || p > 1000 || seen[p] {
			t.Fatalf("place %d given twice or out of range", p)
		}
		seen[p] = true
		if int(p) != i+1 {
			moved++
		}
	}
	if moved < 900 {
		t.Fatalf("the draw left %d of 1000 places where they were", 1000-moved)
	}
}
