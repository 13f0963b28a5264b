package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// refuseWhenSet refuses while its key exists.
const refuseWhenSet = `local function refuse(keys, args)
  if redis.call('EXISTS', keys[1]) == 1 then return args[1] end
  return false
end`

// TestBeginCheckedRefusesOnlyAKeyNeverUsed: the check refuses a key with no
// record and leaves none behind; a key with a record answers as its record
// says (in flight, stored answer, tried), whatever the check would say,
// since that record is what a retry must not miss.
func TestBeginCheckedRefusesOnlyAKeyNeverUsed(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("refusal")
	s := idempotency.New(rdb, idempotency.Options{Prefix: ns + ":", Lease: time.Hour})
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	flag := ns + ":sold-out"
	check := idempotency.Refusal{Src: refuseWhenSet, Keys: []string{flag}, Args: []any{"sold-out"}}

	if c, _, err := s.BeginChecked(ctx, "u", "/p", "free", fp, check); err != nil || c == nil {
		t.Fatalf("the check lets a request through while its key is unset: %v", err)
	}
	if err := rdb.Set(ctx, flag, 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	var refused *idempotency.RefusedError
	if _, _, err := s.BeginChecked(ctx, "u", "/p", "late", fp, check); !errors.As(err, &refused) || refused.Reason != "sold-out" {
		t.Fatalf("a key never used, refused: got %v", err)
	}
	if keys, err := rdb.Keys(ctx, ns+":*").Result(); err != nil || len(keys) != 2 {
		t.Fatalf("a refusal leaves no record: keys %v (want the flag and the free key's claim), %v", keys, err)
	}
	if c, _, err := s.Begin(ctx, "u", "/p", "late", fp); err != nil || c == nil || c.Retaken() {
		t.Fatalf("the refused key is still a first try: %v", err)
	}

	// Keys with records: the record decides.
	if _, _, err := s.BeginChecked(ctx, "u", "/p", "free", fp, check); !errors.Is(err, idempotency.ErrInFlight) {
		t.Fatalf("a key in flight: got %v, want ErrInFlight", err)
	}
	done, _, err := s.Begin(ctx, "u", "/p", "done", fp)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, done, idempotency.Response{Status: 201, Body: []byte(`{"order_no":"O1"}`)}); err != nil {
		t.Fatal(err)
	}
	if c, r, err := s.BeginChecked(ctx, "u", "/p", "done", fp, check); err != nil || c != nil || r == nil || r.Status != 201 {
		t.Fatalf("a key with a stored answer replays it: claim %v, response %+v, %v", c, r, err)
	}
	tried, _, err := s.Begin(ctx, "u", "/p", "tried", fp)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Unknown(ctx, tried); err != nil {
		t.Fatal(err)
	}
	if c, _, err := s.BeginChecked(ctx, "u", "/p", "tried", fp, check); err != nil || c == nil || !c.Retaken() {
		t.Fatalf("a key whose run was cut off is retaken, not refused: %v", err)
	}
}

// TestChecksOnlyTheStoresOwnRedis: a check runs in the claim's script, so
// its keys must be on the store's Redis, one server (not a Cluster's slots
// or a Ring's shards).
func TestChecksOnlyTheStoresOwnRedis(t *testing.T) {
	rdb := testenv.Redis(t)
	other := testenv.Redis(t)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	if s := idempotency.New(rdb, idempotency.Options{}); !s.Checks(rdb) || s.Checks(other) || s.Checks(nil) {
		t.Fatal("a store checks on its own client only")
	}
	if s := idempotency.New(cluster, idempotency.Options{}); s.Checks(cluster) {
		t.Fatal("a store on a Cluster cannot check")
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	t.Cleanup(func() { _ = ring.Close() })
	if s := idempotency.New(ring, idempotency.Options{}); s.Checks(ring) {
		t.Fatal("a store on a Ring cannot check")
	}
}

// takeOne takes a unit when one is left, and says how many are left; it
// refuses when none is.
const takeOne = `local function refuse(keys, args)
  local left = tonumber(redis.call('GET', keys[1]) or '0')
  if left < 1 then return 'sold-out' end
  return false, 'left:' .. redis.call('DECR', keys[1])
end`

// forget deletes a field of a hash, as the settle's Also.
const forget = `local function also(keys, args)
  redis.call('HDEL', keys[1], args[1])
end`

// TestRefusalThatTakesAndAlsoOnEverySettle: a check that does the
// request's first step answers with the claim (Claim.Reply), only for a
// key never used; a key tried before is claimed again without the step.
// Whatever settles the claim (Finish, Abandon, Unknown) runs its Also in
// the same script, and runs it even when another claim owns the record by
// then (the step it confirms was taken all the same).
func TestRefusalThatTakesAndAlsoOnEverySettle(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("takes")
	s := idempotency.New(rdb, idempotency.Options{Prefix: ns + ":", Lease: time.Hour})
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	units, marks := ns+":units", ns+":marks"
	if err := rdb.Set(ctx, units, 3, 0).Err(); err != nil {
		t.Fatal(err)
	}
	step := idempotency.Refusal{Src: takeOne, Keys: []string{units}}
	also := func(c *idempotency.Claim, field string) {
		t.Helper()
		if err := rdb.HSet(ctx, marks, field, 1).Err(); err != nil {
			t.Fatal(err)
		}
		c.Also(idempotency.Also{Src: forget, Keys: []string{marks}, Args: []any{field}})
	}
	for i, settle := range []func(*idempotency.Claim) error{
		func(c *idempotency.Claim) error {
			return s.Finish(ctx, c, idempotency.Response{Status: 201, Body: []byte("{}")})
		},
		func(c *idempotency.Claim) error { return s.Abandon(ctx, c) },
		func(c *idempotency.Claim) error { return s.Unknown(ctx, c) },
	} {
		key := []string{"finish", "abandon", "unknown"}[i]
		c, _, err := s.BeginChecked(ctx, "u", "/p", key, fp, step)
		if err != nil || c == nil || c.Reply() != "left:"+[]string{"2", "1", "0"}[i] {
			t.Fatalf("%s: a claim whose check took a unit: %+v %v, want its reply", key, c, err)
		}
		also(c, key)
		if err := settle(c); err != nil {
			t.Fatal(err)
		}
		if n, err := rdb.HExists(ctx, marks, key).Result(); err != nil || n {
			t.Fatalf("%s: the settle did not run its Also: %v %v", key, n, err)
		}
	}
	// The tried key is claimed again, without the step: no unit is left,
	// and it is not refused.
	c, _, err := s.BeginChecked(ctx, "u", "/p", "unknown", fp, step)
	if err != nil || c == nil || !c.Retaken() || c.Reply() != "" {
		t.Fatalf("a tried key: %+v %v, want it retaken without the step", c, err)
	}
	// A claim whose record another claim took meanwhile: its settle
	// leaves the record alone and still runs its Also.
	if err := rdb.Set(ctx, units, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, _, err := s.BeginChecked(ctx, "u", "/p", "lapsed", fp, step)
	if err != nil || old == nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, ns+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k != units && k != marks {
			if err := rdb.Set(ctx, k, `{"token":"another","fp":"`+fp+`","lease_until":99999999999999}`, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	also(old, "lapsed")
	if err := s.Finish(ctx, old, idempotency.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.HExists(ctx, marks, "lapsed").Result(); n {
		t.Fatal("the settle of a claim that lost its record did not run its Also")
	}
	if _, _, err := s.BeginChecked(ctx, "u", "/p", "lapsed", fp, step); !errors.Is(err, idempotency.ErrInFlight) {
		t.Fatalf("the other claim's record: %v, want it still in flight", err)
	}
}
