package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestClaimAfterASlotMovedRereadsTheMap: with Options.Replicas on a
// Cluster, a claim goes down a connection to the master the client's
// slot map names for the record, past the cluster client's own routing.
// The record's slot moves to another master behind the client's back (a
// resharding's last step; a failover looks the same). The first claim is
// answered MOVED: it ran nowhere, and says so (ErrUnavailable). The
// cluster client rereads its map on a MOVED it gets itself; one the store
// gets must make it reread too, or every claim of the slot fails until the
// map's next periodic reload (an hour here; a second in the app).
func TestClaimAfterASlotMovedRereadsTheMap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and moves a slot; left to the full tier")
	}
	procs := testenv.StartRedisClusterWithReplicas(t, 0)
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.Addr)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, MaxRedirects: -1, ClusterStateReloadInterval: time.Hour})
	t.Cleanup(func() { _ = rdb.Close() })
	// No master has a replica: a claim that runs is not confirmed (and
	// given back) at once, which tells it from one answered MOVED.
	store := idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("idem") + ":", Replicas: 1, ReplicaWait: time.Millisecond, Lease: time.Hour})
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	rk := idempotency.RecordKey(store, "u", "/p", "k")

	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	from, err := rdb.MasterForKey(ctx, rk)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := procs[0].Client().ClusterKeySlot(ctx, rk).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, p := range procs {
		id, err := p.Client().Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		ids[p.Addr] = id
	}
	var to *testenv.RedisProcess
	for _, p := range procs {
		if p.Addr != from.Options().Addr {
			to = p
			break
		}
	}
	// The slot holds no key: it moves by being assigned, on its new
	// master first, then on every other node.
	order := []*testenv.RedisProcess{to}
	for _, p := range procs {
		if p != to {
			order = append(order, p)
		}
	}
	for _, p := range order {
		if err := p.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to.Addr]).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d NODE %s on %s: %v", slot, to.Addr, p.Addr, err)
		}
	}

	_, _, err = store.Begin(ctx, "u", "/p", "k", fp)
	var moved redis.Error
	if !errors.Is(err, idempotency.ErrUnavailable) || !errors.As(err, &moved) || !redis.HasErrorPrefix(moved, "MOVED") {
		t.Fatalf("a claim sent to the slot's old master: %v; want ErrUnavailable with its MOVED", err)
	}
	if n, err := to.Client().Exists(ctx, rk).Result(); err != nil || n != 0 {
		t.Fatalf("a claim answered MOVED left %d records on the new master (%v)", n, err)
	}
	testkit.Eventually(t, "a claim after the MOVED reaches the slot's new master", 20*time.Second, func() bool {
		_, _, err := store.Begin(ctx, "u", "/p", "k", fp)
		return errors.Is(err, idempotency.ErrNotReplicated)
	})
}
