package idempotency_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
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

// retake claims (u, /p, k), lets its short lease run out, and returns the
// old claim and the one that took the key over.
func retake(t *testing.T, s *idempotency.Store, fp string) (old, cur *idempotency.Claim) {
	t.Helper()
	ctx := context.Background()
	old, _, err := s.Begin(ctx, "u", "/p", "k", fp)
	if err != nil || old == nil {
		t.Fatalf("first claim: %v", err)
	}
	testkit.Eventually(t, "the lease to run out and the key to be retaken", 10*time.Second, func() bool {
		c, _, err := s.Begin(ctx, "u", "/p", "k", fp)
		if err == nil && c != nil {
			cur = c
			return true
		}
		if !errors.Is(err, idempotency.ErrInFlight) {
			t.Errorf("while the old claim's lease lives: %v", err)
		}
		return false
	})
	if !cur.Retaken() {
		t.Fatal("the claim after a lease ran out must be retaken")
	}
	return old, cur
}

// TestLateSettleOfTheOldRunDoesNotTouchTheNewClaim: a run paused
// past its lease wakes up after another took its key over; whatever it
// settles with (an answer, "unknown", abandon) must leave the new claim in
// flight, and the new claim's answer is the one replayed.
func TestLateSettleOfTheOldRunDoesNotTouchTheNewClaim(t *testing.T) {
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	for name, late := range map[string]func(*idempotency.Store, *idempotency.Claim) error{
		"finish": func(s *idempotency.Store, c *idempotency.Claim) error {
			return s.Finish(ctx, c, idempotency.Response{Status: 409})
		},
		"unknown": func(s *idempotency.Store, c *idempotency.Claim) error { return s.Unknown(ctx, c) },
		"abandon": func(s *idempotency.Store, c *idempotency.Claim) error { return s.Abandon(ctx, c) },
	} {
		t.Run(name, func(t *testing.T) {
			s := idempotency.New(testenv.Redis(t), idempotency.Options{Prefix: testenv.Name("idem") + ":", Lease: 200 * time.Millisecond})
			old, cur := retake(t, s, fp)
			if err := late(s, old); err != nil {
				t.Fatal(err)
			}
			// The new claim's lease (200 ms) may run out too while this
			// runs on a slow machine; what must not happen is a replay of
			// the old answer or a fresh, un-retaken claim.
			c, stored, err := s.Begin(ctx, "u", "/p", "k", fp)
			switch {
			case stored != nil:
				t.Fatalf("the old run's late %s was stored: %+v", name, stored)
			case err == nil && !c.Retaken():
				t.Fatalf("the old run's late %s emptied the key: the next claim is a first try", name)
			case err != nil && !errors.Is(err, idempotency.ErrInFlight):
				t.Fatal(err)
			}
			if err == nil {
				cur = c // the lease did run out: finish with the newest claim
			}
			if err := s.Finish(ctx, cur, idempotency.Response{Status: 201, Body: []byte("new")}); err != nil {
				t.Fatal(err)
			}
			if _, got, err := s.Begin(ctx, "u", "/p", "k", fp); err != nil || got == nil || string(got.Body) != "new" {
				t.Fatalf("want the new answer replayed, got %+v, %v", got, err)
			}
		})
	}
}

// TestAbandonOfARetakenClaimKeepsItTried: the retry of a run whose
// outcome is unknown is itself turned away with nothing written (503
// overloaded, 429): abandoning it must not forget the earlier run, or the
// retry after it decides afresh ("sold out") for a buyer who holds an
// order.
func TestAbandonOfARetakenClaimKeepsItTried(t *testing.T) {
	ctx := context.Background()
	s := idempotency.New(testenv.Redis(t), idempotency.Options{Prefix: testenv.Name("idem") + ":", Lease: time.Hour})
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	first, _, err := s.Begin(ctx, "u", "/p", "k", fp)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Unknown(ctx, first); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		retry, _, err := s.Begin(ctx, "u", "/p", "k", fp)
		if err != nil || !retry.Retaken() {
			t.Fatalf("retry %d: %v, retaken %v; want a retaken claim", i, err, err == nil && retry.Retaken())
		}
		if err := s.Abandon(ctx, retry); err != nil {
			t.Fatal(err)
		}
	}
}

// recordKey is Store.recordKey, to plant records as the previous code
// wrote them.
func recordKey(prefix, user, route, key string) string {
	h := sha256.New()
	for _, part := range []string{user, route, key} {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	return prefix + hex.EncodeToString(h.Sum(nil))
}

// endLease ends now the in-flight lease of the record of (u, /p, key), after
// checking that its claim set it to end within lease of Redis's clock. A
// test that needs a lease to run out takes a long one and ends it here: a
// short one could also run out before the steps meant to run inside it, on
// a starved machine (a claim of 300 ms expired between two Begins in a
// busy CI run's reach).
func endLease(t *testing.T, rdb *redis.Client, prefix, key string, lease time.Duration) {
	t.Helper()
	ctx := context.Background()
	k := recordKey(prefix, "u", "/p", key)
	raw, err := rdb.Get(ctx, k).Bytes()
	if err != nil {
		t.Fatalf("the record of %q: %v", key, err)
	}
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatalf("the record of %q: %v", key, err)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	until, ok := rec["lease_until"].(float64)
	if ms := now.UnixMilli(); !ok || int64(until) <= ms || int64(until) > ms+lease.Milliseconds() {
		t.Fatalf("the claim of %q leased until %v; want after now (%d) and within %v", key, rec["lease_until"], ms, lease)
	}
	rec["lease_until"] = now.UnixMilli() - 1
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.SetArgs(ctx, k, b, redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsOfThePreviousCode: across the deploy, Redis holds
// records the previous code wrote: markers without lease_until whose key
// lived for the lease, and stored answers. A marker is in flight until
// its key expires, then the key is claimed afresh (the old code's crash
// recovery; it cannot be told from a first try); an answer is replayed;
// another body is refused.
func TestRecordsOfThePreviousCode(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("idem") + ":"
	s := idempotency.New(rdb, idempotency.Options{Prefix: prefix, Lease: time.Hour})
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	other := idempotency.Fingerprint("POST", "/p", []byte(`{"x":1}`))

	marker, _ := json.Marshal(map[string]string{"token": "old-token", "fp": fp})
	// The old code's marker lived for the lease: a minute here, so that
	// it lives through the two Begins on any machine; then it expires.
	if err := rdb.Set(ctx, recordKey(prefix, "u", "/p", "marker"), marker, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Begin(ctx, "u", "/p", "marker", fp); !errors.Is(err, idempotency.ErrInFlight) {
		t.Fatalf("an old marker that lives: %v, want in flight", err)
	}
	if _, _, err := s.Begin(ctx, "u", "/p", "marker", other); !errors.Is(err, idempotency.ErrMismatch) {
		t.Fatalf("an old marker, another body: %v, want mismatch", err)
	}
	if ttl, err := rdb.PTTL(ctx, recordKey(prefix, "u", "/p", "marker")).Result(); err != nil || ttl <= 0 {
		t.Fatalf("the old marker's TTL after two Begins: %v, %v; want it left as it was", ttl, err)
	}
	if err := rdb.PExpire(ctx, recordKey(prefix, "u", "/p", "marker"), time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	var c *idempotency.Claim
	testkit.Eventually(t, "the old marker to expire", 10*time.Second, func() bool {
		c, _, _ = s.Begin(ctx, "u", "/p", "marker", fp)
		return c != nil
	})

	done, _ := json.Marshal(map[string]any{"fp": fp, "response": idempotency.Response{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"order_no":"O1"}`)}})
	if err := rdb.Set(ctx, recordKey(prefix, "u", "/p", "done"), done, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, got, err := s.Begin(ctx, "u", "/p", "done", fp); err != nil || got == nil || got.Status != 201 || string(got.Body) != `{"order_no":"O1"}` {
		t.Fatalf("an old stored answer: %+v, %v; want it replayed", got, err)
	}
	if _, _, err := s.Begin(ctx, "u", "/p", "done", other); !errors.Is(err, idempotency.ErrMismatch) {
		t.Fatalf("an old stored answer, another body: %v, want mismatch", err)
	}
}
