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

// replicaCluster is a three-master Cluster with a replica per master and a
// store over it that waits for one replica.
type replicaCluster struct {
	procs []*testenv.RedisProcess
	rdb   *redis.ClusterClient
	store *idempotency.Store
	// short is store with a short wait, for what no replica can confirm.
	short *idempotency.Store
}

func newReplicaCluster(t *testing.T) *replicaCluster {
	t.Helper()
	c := &replicaCluster{procs: testenv.StartRedisClusterWithReplicas(t, 1)}
	var addrs []string
	for _, p := range c.procs {
		addrs = append(addrs, p.Addr)
	}
	// As the app's client: every command sent once, the slot map reread
	// once it is a second old.
	c.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, MaxRedirects: -1, ClusterStateReloadInterval: time.Second})
	t.Cleanup(func() { _ = c.rdb.Close() })
	// WAIT answers as soon as the replica confirms; the long bound only
	// covers a replica slowed by CPU hogs. A stopped one makes every
	// unconfirmed claim or settle wait its bound out: those go through
	// short.
	prefix := testenv.Name("idem") + ":"
	c.store = idempotency.New(c.rdb, idempotency.Options{Prefix: prefix, Replicas: 1, ReplicaWait: 2 * time.Second, Lease: time.Hour})
	c.short = idempotency.New(c.rdb, idempotency.Options{Prefix: prefix, Replicas: 1, ReplicaWait: 250 * time.Millisecond, Lease: time.Hour})
	return c
}

// nodesOf returns the master that serves the record of (user, key) and its
// replica, as the replicas themselves say.
func (c *replicaCluster) nodesOf(t *testing.T, ctx context.Context, user, key string) (master, replica *testenv.RedisProcess) {
	t.Helper()
	slot, err := c.rdb.ClusterKeySlot(ctx, idempotency.RecordKey(c.store, user, "/p", key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.procs {
		nodes, err := p.Client().ClusterSlots(ctx).Result()
		if err != nil {
			continue
		}
		for _, r := range nodes {
			if int64(r.Start) > slot || slot > int64(r.End) || r.Nodes[0].Addr != p.Addr {
				continue
			}
			_, port, _ := strings.Cut(p.Addr, ":")
			for _, q := range c.procs {
				repl, err := q.Client().Info(ctx, "replication").Result()
				if err == nil && strings.Contains(repl, "role:slave") && strings.Contains(repl, "master_port:"+port+"\r\n") {
					return p, q
				}
			}
		}
	}
	t.Fatalf("no master with a replica serves slot %d", slot)
	return nil, nil
}

// cutOff stops replica and cuts its link, so that nothing its master
// writes from now on reaches it.
func cutOff(t *testing.T, ctx context.Context, master, replica *testenv.RedisProcess) {
	t.Helper()
	replica.Pause()
	if err := master.Client().ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the master "+master.Addr+" has no replica connected", 30*time.Second, func() bool {
		info, err := master.Client().Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0")
	})
}

// failOver kills master, lets its replica run again and makes it take
// over the slots (TAKEOVER: the dead master cannot agree).
func failOver(t *testing.T, ctx context.Context, master, replica *testenv.RedisProcess) {
	t.Helper()
	master.Kill()
	replica.Resume()
	testkit.Eventually(t, "the replica "+replica.Addr+" to take over from "+master.Addr, 2*time.Minute, func() bool {
		repl, err := replica.Client().Info(ctx, "replication").Result()
		if err == nil && strings.Contains(repl, "role:master") {
			return true
		}
		_ = replica.Client().Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err()
		return false
	})
}

// claimAgain is a retry of (user, key) after the failover, through a
// cluster client that has seen the new slot map.
func (c *replicaCluster) claimAgain(t *testing.T, ctx context.Context, user, key, fp string) (*idempotency.Claim, *idempotency.Response, error) {
	t.Helper()
	var (
		claim  *idempotency.Claim
		stored *idempotency.Response
		err    error
	)
	testkit.Eventually(t, "a retry of "+key+" reaches the promoted replica", time.Minute, func() bool {
		c.rdb.ReloadState(ctx)
		claim, stored, err = c.store.Begin(ctx, user, "/p", key, fp)
		return !errors.Is(err, idempotency.ErrUnavailable)
	})
	return claim, stored, err
}

// TestKeyRecordOnAClusterOutlivesItsMaster: with Options.Replicas on a
// Cluster, a key's record is confirmed on the replica of its slot's
// master, or the store says so. A claim no replica holds is refused
// before its request runs (a failover could lose it while the request
// bought, and the retry would then run afresh and be told "sold out" by
// an instance that remembers the sell-out); a settle no replica holds
// fails with ErrNotReplicated (its answer is not told). So whatever the
// store confirmed, a retry after the master's death finds: the stored
// answer, or the claim still in flight, never a key that looks unused.
func TestKeyRecordOnAClusterOutlivesItsMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster of six servers and fails three masters over; left to the full tier")
	}
	c := newReplicaCluster(t)
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))

	// Three keys, each on its own master, for the three cases.
	var keys []string
	var masters, replicas []*testenv.RedisProcess
	seen := map[string]bool{}
	for i := 0; len(keys) < 3 && i < 1000; i++ {
		key := "k" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
		m, r := c.nodesOf(t, ctx, "u", key)
		if seen[m.Addr] {
			continue
		}
		seen[m.Addr] = true
		keys, masters, replicas = append(keys, key), append(masters, m), append(replicas, r)
	}
	if len(keys) < 3 {
		t.Fatal("found no key for every master")
	}

	t.Run("a claim its replica never saw does not run", func(t *testing.T) {
		key, master, replica := keys[0], masters[0], replicas[0]
		cutOff(t, ctx, master, replica)
		claim, _, err := c.short.Begin(ctx, "u", "/p", key, fp)
		if err == nil {
			// The request would run now (buy, commit) under a claim that
			// lives on the master alone.
			failOver(t, ctx, master, replica)
			again, stored, err := c.claimAgain(t, ctx, "u", key, fp)
			if again != nil && !again.Retaken() {
				t.Fatalf("the first claim of %s was granted (%v), yet after its master died a retry claimed the key afresh: a request that may have bought looks never tried", key, claim != nil)
			}
			t.Logf("retry after the failover: %v, %v", stored, err)
			return
		}
		if !errors.Is(err, idempotency.ErrUnavailable) || !errors.Is(err, idempotency.ErrNotReplicated) {
			t.Fatalf("a claim no replica confirmed failed with %v; want ErrUnavailable (nothing ran) and ErrNotReplicated", err)
		}
		replica.Resume()
	})

	t.Run("a settle its replica never saw is not told, and the retry finds the claim", func(t *testing.T) {
		key, master, replica := keys[1], masters[1], replicas[1]
		claim, _, err := c.store.Begin(ctx, "u", "/p", key, fp)
		if err != nil || claim == nil {
			t.Fatalf("claim of %s with its replica in sync: %v", key, err)
		}
		cutOff(t, ctx, master, replica)
		if err := c.short.Finish(ctx, claim, idempotency.Response{Status: 201, Body: []byte(key)}); !errors.Is(err, idempotency.ErrNotReplicated) {
			t.Fatalf("a Finish no replica holds answered %v, want ErrNotReplicated", err)
		}
		failOver(t, ctx, master, replica)
		again, stored, err := c.claimAgain(t, ctx, "u", key, fp)
		if !errors.Is(err, idempotency.ErrInFlight) {
			t.Fatalf("after the failover a retry of %s got claim %v (retaken %v), stored %v, err %v; want the first claim still in flight", key, again != nil, again != nil && again.Retaken(), stored, err)
		}
	})

	t.Run("a settle its replica confirmed is replayed after the failover", func(t *testing.T) {
		key, master, replica := keys[2], masters[2], replicas[2]
		claim, _, err := c.store.Begin(ctx, "u", "/p", key, fp)
		if err != nil || claim == nil {
			t.Fatalf("claim of %s with its replica in sync: %v", key, err)
		}
		if err := c.store.Finish(ctx, claim, idempotency.Response{Status: 201, Body: []byte(key)}); err != nil {
			t.Fatalf("Finish with its replica in sync: %v", err)
		}
		replica.Pause() // nothing more may reach it: it must already hold the answer
		failOver(t, ctx, master, replica)
		_, stored, err := c.claimAgain(t, ctx, "u", key, fp)
		if err != nil || stored == nil || string(stored.Body) != key {
			t.Fatalf("after the failover the confirmed record of %s answers %v, %v; want its stored answer replayed", key, stored, err)
		}
	})
}
