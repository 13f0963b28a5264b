package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestSettleConfirmedOnAReplica: with Options.Replicas, a Finish that
// returns nil is on the replica, so a failover to it replays the answer;
// one the replica cannot confirm (here it is stopped and its link cut)
// says so with ErrNotReplicated instead of returning nil.
func TestSettleConfirmedOnAReplica(t *testing.T) {
	primary, replica := testenv.StartReplicaPair(t)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testenv.Name("idem") + ":"
	// WAIT answers as soon as the replica confirms: the long wait only
	// bounds a replica slowed by CPU hogs (200ms failed so in stress runs).
	// Where no replica can confirm, a short one ends the wait.
	patient := idempotency.New(rdb, idempotency.Options{Prefix: prefix, Replicas: 1, ReplicaWait: 30 * time.Second})
	short := idempotency.New(rdb, idempotency.Options{Prefix: prefix, Replicas: 1, ReplicaWait: 200 * time.Millisecond})
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	claim := func(s *idempotency.Store, key string) *idempotency.Claim {
		c, _, err := s.Begin(ctx, "u", "/p", key, fp)
		if err != nil || c == nil {
			t.Fatalf("claim of %s: %v", key, err)
		}
		return c
	}
	finish := func(s *idempotency.Store, c *idempotency.Claim, key string) error {
		return s.Finish(ctx, c, idempotency.Response{Status: 202, Body: []byte(key)})
	}
	if err := finish(patient, claim(patient, "confirmed"), "confirmed"); err != nil {
		t.Fatalf("Finish with a replica in sync: %v", err)
	}
	unconfirmed := claim(patient, "unconfirmed") // on the replica too

	// The replica stops and its link is cut: nothing written from now on
	// reaches it.
	replica.Pause()
	admin := redis.NewClient(&redis.Options{Addr: primary.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the primary has no replica connected", 10*time.Second, func() bool {
		info, err := admin.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0")
	})
	if err := finish(short, unconfirmed, "unconfirmed"); !errors.Is(err, idempotency.ErrNotReplicated) {
		t.Fatalf("Finish that no replica holds answered %v, want ErrNotReplicated", err)
	}
	// A claim no replica holds is given back, and its request not run.
	if c, _, err := short.Begin(ctx, "u", "/p", "never-run", fp); c != nil || !errors.Is(err, idempotency.ErrNotReplicated) || !errors.Is(err, idempotency.ErrUnavailable) {
		t.Fatalf("a claim that no replica holds answered %v, %v; want no claim, ErrUnavailable and ErrNotReplicated", c != nil, err)
	}
	if n, err := admin.Exists(ctx, idempotency.RecordKey(short, "u", "/p", "never-run")).Result(); err != nil || n != 0 {
		t.Fatalf("the unconfirmed claim was not given back: %d records (%v)", n, err)
	}

	// The failover: the primary dies, the replica takes over.
	primary.Kill()
	replica.Resume()
	promoted := redis.NewClient(&redis.Options{Addr: replica.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = promoted.Close() })
	if err := promoted.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	after := idempotency.New(promoted, idempotency.Options{Prefix: prefix})
	_, stored, err := after.Begin(ctx, "u", "/p", "confirmed", fp)
	if err != nil || stored == nil || string(stored.Body) != "confirmed" {
		t.Fatalf("after the failover the confirmed record answers %v, %v; want its stored answer replayed", stored, err)
	}
}
