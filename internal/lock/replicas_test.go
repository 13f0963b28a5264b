package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// replicaWait bounds the tests' WAITs: long enough that a running replica
// confirms even on a loaded machine. A stopped replica never does, so its
// length changes only how long a test waits for that answer.
const replicaWait = 2 * time.Second

// With Options.Replicas, a grant the replica did not acknowledge (its
// process is stopped) is given back and reported not obtained, with
// ErrNotReplicated; the same grant without the option is handed out,
// which is how a failover hands a lock out twice. A grant that is
// reported obtained is on the replica the moment Obtain returns.
func TestReplicaSyncGivesBackAGrantNoReplicaConfirmed(t *testing.T) {
	t.Parallel()
	primary, replica := testenv.StartReplicaPair(t)
	rdb := redis.NewClient(lock.ClientOptions(&redis.Options{Addr: primary.Addr}))
	t.Cleanup(func() { _ = rdb.Close() })
	synced := testenv.NewLock(t, rdb, lock.Options{Replicas: 1, ReplicaTimeout: replicaWait})
	plain := testenv.NewLock(t, rdb, lock.Options{})
	ctx := context.Background()
	has := func(c *redis.Client, key string) bool {
		n, err := c.Exists(ctx, "lock:{"+key+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	l, err := synced.Obtain(ctx, "up", time.Minute, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatalf("with the replica up: %v", err)
	}
	if !has(replica.Client(), "up") {
		t.Fatal("the grant was handed out before the replica had it")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	replica.Pause()
	_, err = synced.Obtain(ctx, "held", time.Minute, lock.ObtainOptions{Fixed: true})
	if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, lock.ErrNotReplicated) {
		replica.Resume()
		t.Fatalf("want ErrNotObtained and ErrNotReplicated, got %v", err)
	}
	if has(rdb, "held") {
		replica.Resume()
		t.Fatal("the unconfirmed grant was not given back on the primary")
	}
	unsafe, err := plain.Obtain(ctx, "held", time.Minute, lock.ObtainOptions{Fixed: true})
	replica.Resume()
	if err != nil {
		t.Fatalf("without Replicas the grant is handed out: %v", err)
	}
	if err := unsafe.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A renewal the replica does not acknowledge does not extend the lease:
// Refresh fails with ErrNotReplicated and the lease keeps its deadline,
// still held; once the replica runs again, a renewal is confirmed.
func TestReplicaSyncDoesNotTrustAnUnconfirmedRenewal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a replica and holds its acknowledgements past a lease; left to the full tier")
	}
	t.Parallel()
	primary, replica := testenv.StartReplicaPair(t)
	rdb := redis.NewClient(lock.ClientOptions(&redis.Options{Addr: primary.Addr}))
	t.Cleanup(func() { _ = rdb.Close() })
	synced := testenv.NewLock(t, rdb, lock.Options{Replicas: 1, ReplicaTimeout: replicaWait})
	ctx := context.Background()
	l, err := synced.Obtain(ctx, "renew", time.Minute, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatal(err)
	}
	before := l.Deadline()
	replica.Pause()
	err = l.Refresh(ctx, 2*time.Minute)
	replica.Resume()
	if !errors.Is(err, lock.ErrNotReplicated) {
		t.Fatalf("want ErrNotReplicated, got %v", err)
	}
	if l.Err() != nil {
		t.Fatalf("an unconfirmed renewal must not end the lease before its deadline: %v", l.Err())
	}
	if l.Deadline().After(before) {
		t.Fatalf("an unconfirmed renewal moved the deadline from %v to %v", before, l.Deadline())
	}
	testenv.WaitReplicaSynced(t, replica)
	if err := l.Refresh(ctx, 2*time.Minute); err != nil {
		t.Fatalf("with the replica back: %v", err)
	}
	if !l.Deadline().After(before) {
		t.Fatal("a confirmed renewal did not extend the lease")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Replicas needs the script and its WAIT on one connection, which a
// Cluster client does not give, and a primary with replicas, which
// RedLock's independent servers are not.
func TestReplicaSyncRefusesAClusterClient(t *testing.T) {
	t.Parallel()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1, MaxRedirects: -1})
	t.Cleanup(func() { _ = c.Close() })
	if _, err := lock.New(c, lock.Options{Replicas: 1}); err == nil {
		t.Fatal("New accepted Replicas with a Cluster client")
	}
	one := redis.NewClient(lock.InstanceOptions(&redis.Options{Addr: "127.0.0.1:1"}))
	t.Cleanup(func() { _ = one.Close() })
	if _, err := lock.NewRedLock([]redis.UniversalClient{one}, lock.RedLockOptions{Options: lock.Options{Replicas: 1}}); err == nil {
		t.Fatal("NewRedLock accepted Replicas for independent servers")
	}
}
