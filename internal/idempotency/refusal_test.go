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
