package room

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Token errors: each is a stable problem type in the HTTP layer.
var (
	// ErrMalformed is a token that does not parse, or one of the other
	// kind (a pass sent as a ticket, or back).
	ErrMalformed = errors.New("room token malformed")
	// ErrForged is a token whose signature no accepted key verifies.
	ErrForged = errors.New("room token forged")
	// ErrExpired is a pass past its validity, a ticket of an earlier
	// room of the item, or a place whose turn passed unused.
	ErrExpired = errors.New("room token expired")
	// ErrWrongItem is a token signed for another item.
	ErrWrongItem = errors.New("room token for another item")
	// ErrWrongBuyer is a token signed for another buyer.
	ErrWrongBuyer = errors.New("room token for another buyer")
)

// Kind says what a token is.
type Kind byte

// The kinds of token.
const (
	KindTicket Kind = 'T'
	KindPass   Kind = 'P'
)

// flagEarly marks a ticket that joined during the opening span: its place
// is an arrival number the draw's permutation turns into its place.
const flagEarly = 1

// Token is a ticket or a pass, as signed.
type Token struct {
	Kind  Kind
	Early bool
	Item  int64
	Epoch int64 // the room's epoch (its creation instant, unix ms)
	Place int64
	// At is the arrival (ticket) or the place's admission (pass), unix ms
	// on the room's clock.
	At int64
	// Expires is unix ms on the room's clock; 0 for a ticket, which lives
	// as long as its room.
	Expires int64
	Buyer   string
}

// tokenPrefix starts every token; macDomain separates this MAC from any
// other use of the key.
const (
	tokenPrefix = "r1"
	macDomain   = "seckill-room-v1."
	macLen      = 16
	maxBuyer    = 256 // bytes: 64 characters of up to 4 bytes (inventory.MaxUserID)
)

// Key is one signing key.
type Key struct {
	ID     string
	Secret []byte
}

// Signer signs with its first key and verifies with every key: two keys
// at once let a fleet rotate (add the new key second, then first, then
// drop the old).
type Signer struct{ keys []Key }

// NewSigner returns a signer over keys, the first signing. Each ID is 1 to
// 16 letters or digits, each secret at least 16 bytes.
func NewSigner(keys []Key) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("room: no signing key")
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if !validKeyID(k.ID) {
			return nil, fmt.Errorf("room: key id %q: want 1 to 16 letters or digits", k.ID)
		}
		if len(k.Secret) < 16 {
			return nil, fmt.Errorf("room: key %q: secret under 16 bytes", k.ID)
		}
		if seen[k.ID] {
			return nil, fmt.Errorf("room: key id %q twice", k.ID)
		}
		seen[k.ID] = true
	}
	return &Signer{keys: keys}, nil
}

// RandomSigner is a signer with one random key: enough for one instance,
// not for a fleet, whose instances must share their keys.
func RandomSigner() *Signer {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // crypto/rand.Read does not fail (Go 1.24)
	return &Signer{keys: []Key{{ID: "local", Secret: secret}}}
}

// ParseKeys reads keys written as "id:secret[,id:secret]".
func ParseKeys(s string) ([]Key, error) {
	var keys []Key
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		id, secret, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("room: key %q: want id:secret", redact(part))
		}
		keys = append(keys, Key{ID: id, Secret: []byte(secret)})
	}
	if _, err := NewSigner(keys); err != nil {
		return nil, err
	}
	return keys, nil
}

func redact(s string) string {
	id, _, _ := strings.Cut(s, ":")
	return id + ":…"
}

func validKeyID(id string) bool {
	if len(id) == 0 || len(id) > 16 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Sign encodes t and signs it with the first key.
func (s *Signer) Sign(t Token) string {
	k := s.keys[0]
	payload := base64.RawURLEncoding.EncodeToString(encode(t))
	return tokenPrefix + "." + k.ID + "." + payload + "." + base64.RawURLEncoding.EncodeToString(mac(k, payload))
}

// Verify parses a token of kind want and checks its signature. It returns
// ErrMalformed or ErrForged; what the token names is the caller's to check.
func (s *Signer) Verify(tok string, want Kind) (Token, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 4 || parts[0] != tokenPrefix {
		return Token{}, ErrMalformed
	}
	sum, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(sum) != macLen {
		return Token{}, ErrMalformed
	}
	var key *Key
	for i := range s.keys {
		if s.keys[i].ID == parts[1] {
			key = &s.keys[i]
		}
	}
	if key == nil || !hmac.Equal(sum, mac(*key, parts[2])) {
		return Token{}, ErrForged
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return Token{}, ErrMalformed
	}
	t, err := decode(raw)
	if err != nil || t.Kind != want {
		return Token{}, ErrMalformed
	}
	return t, nil
}

func mac(k Key, payload string) []byte {
	h := hmac.New(sha256.New, k.Secret)
	h.Write([]byte(macDomain + k.ID + "." + payload))
	return h.Sum(nil)[:macLen]
}

// encode writes t compactly: kind, flags, then uvarints (item, epoch,
// place, at, expires), then the buyer with its length.
func encode(t Token) []byte {
	b := make([]byte, 0, 32+len(t.Buyer))
	var flags byte
	if t.Early {
		flags |= flagEarly
	}
	b = append(b, byte(t.Kind), flags)
	for _, v := range []int64{t.Item, t.Epoch, t.Place, t.At, t.Expires} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	b = binary.AppendUvarint(b, uint64(len(t.Buyer)))
	return append(b, t.Buyer...)
}

func decode(b []byte) (Token, error) {
	if len(b) < 2 {
		return Token{}, ErrMalformed
	}
	t := Token{Kind: Kind(b[0]), Early: b[1]&flagEarly != 0}
	if t.Kind != KindTicket && t.Kind != KindPass || b[1]&^flagEarly != 0 {
		return Token{}, ErrMalformed
	}
	b = b[2:]
	var vals [6]int64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<62 {
			return Token{}, ErrMalformed
		}
		vals[i], b = int64(v), b[n:]
	}
	if vals[5] != int64(len(b)) || len(b) > maxBuyer {
		return Token{}, ErrMalformed
	}
	t.Item, t.Epoch, t.Place, t.At, t.Expires, t.Buyer = vals[0], vals[1], vals[2], vals[3], vals[4], string(b)
	return t, nil
}
