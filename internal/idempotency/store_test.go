package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestCrashedClaimDoesNotBlockForever: a request that claimed a key and
// died before finishing leaves an in-flight marker; duplicates are refused
// while it lives, and the key can be claimed again once its lease is over
// (ended by the test: an hour-long lease that a short one would make
// depend on the machine's pace).
func TestCrashedClaimDoesNotBlockForever(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Name("idem") + ":"
	s := idempotency.New(rdb, idempotency.Options{Prefix: prefix, Lease: time.Hour})
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	if c, _, err := s.Begin(ctx, "u", "/p", "k", fp); err != nil || c == nil {
		t.Fatalf("first claim: %v", err)
	} // ... and the process "crashes": no Finish, no Abandon.
	if _, _, err := s.Begin(ctx, "u", "/p", "k", fp); !errors.Is(err, idempotency.ErrInFlight) {
		t.Fatalf("a duplicate while the marker lives must be in flight, got %v", err)
	}
	endLease(t, rdb, prefix, "k", time.Hour)
	c, _, err := s.Begin(ctx, "u", "/p", "k", fp)
	if err != nil || c == nil {
		t.Fatalf("the key stayed blocked once the crashed run's lease ended: %v", err)
	}
	if !c.Retaken() {
		t.Fatal("the claim after a crashed run must say the key was retaken: that run may have bought")
	}
}

// TestLateFinishDoesNotOverwriteANewClaim: a request whose lease ran out
// must not store its answer over the claim of the request that took over.
func TestLateFinishDoesNotOverwriteANewClaim(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Name("idem") + ":"
	s := idempotency.New(rdb, idempotency.Options{Prefix: prefix, Lease: time.Hour})
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	old, _, err := s.Begin(ctx, "u", "/p", "k", fp)
	if err != nil {
		t.Fatal(err)
	}
	endLease(t, rdb, prefix, "k", time.Hour)
	fresh, _, err := s.Begin(ctx, "u", "/p", "k", fp)
	if err != nil || fresh == nil {
		t.Fatalf("no new claim once the old lease ended: %v", err)
	}
	if err := s.Finish(ctx, old, idempotency.Response{Status: 201, Body: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	if _, stored, err := s.Begin(ctx, "u", "/p", "k", fp); !errors.Is(err, idempotency.ErrInFlight) || stored != nil {
		t.Fatalf("the late finish replaced the new claim: stored=%v err=%v", stored, err)
	}
	if err := s.Finish(ctx, fresh, idempotency.Response{Status: 201, Body: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	_, stored, err := s.Begin(ctx, "u", "/p", "k", fp)
	if err != nil || stored == nil || string(stored.Body) != "new" {
		t.Fatalf("want the new answer replayed, got %v %v", stored, err)
	}
}

// TestRetakenTellsATimeoutFromARefusal: a request that ended in a timeout
// (Unknown) may have written; the retry runs at once and is told so. A
// request that was refused with nothing written (Abandon) leaves the key
// as if never tried. A first try is never "retaken".
func TestRetakenTellsATimeoutFromARefusal(t *testing.T) {
	rdb := testenv.Redis(t)
	s := idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("idem") + ":", Lease: time.Hour})
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	for _, c := range []struct {
		key     string
		settle  func(*idempotency.Claim) error
		retaken bool
	}{
		{"timed-out", func(c *idempotency.Claim) error { return s.Unknown(ctx, c) }, true},
		{"refused", func(c *idempotency.Claim) error { return s.Abandon(ctx, c) }, false},
	} {
		first, _, err := s.Begin(ctx, "u", "/p", c.key, fp)
		if err != nil || first.Retaken() {
			t.Fatalf("%s: first try: %v, retaken %v", c.key, err, err == nil && first.Retaken())
		}
		if err := c.settle(first); err != nil {
			t.Fatal(err)
		}
		retry, stored, err := s.Begin(ctx, "u", "/p", c.key, fp)
		if err != nil || stored != nil || retry == nil {
			t.Fatalf("%s: the retry must run (no replay, no wait for the hour-long lease): claim %v, stored %v, err %v", c.key, retry, stored, err)
		}
		if retry.Retaken() != c.retaken {
			t.Errorf("%s: retry retaken = %v, want %v", c.key, retry.Retaken(), c.retaken)
		}
		if _, _, err := s.Begin(ctx, "u", "/p", c.key, idempotency.Fingerprint("POST", "/p", []byte(`{"other":1}`))); !errors.Is(err, idempotency.ErrMismatch) {
			t.Errorf("%s: another body under the key: %v", c.key, err)
		}
	}
}
