package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// failoverTry is what one forced failover after a grant did.
type failoverTry struct {
	grantedA    bool // the first holder was handed the lock
	notReplA    bool // ... or refused it with ErrNotReplicated
	grantedB    bool // the second was handed it on the promoted replica
	doubleGrant bool // both held it at once
	fenced      bool // the first holder's write was refused by its token
	oversold    int
}

// TestRedisLockFailoverAfterGrant forces the window in which a failover
// hands a Redis lock out twice, on real redis-server and redis-sentinel
// processes (a primary, a replica, three sentinels): the replica is
// stopped and its link cut, so that the grant to the first holder A never
// reaches it; the primary is SIGKILLed; the replica runs again and the
// sentinels promote it. A second holder B asks the promoted replica, on
// which the lock is free. Then B sells the one unit in stock and A, which
// still believes it holds the lock, writes its own sale.
//
// Without replica sync every forced try is a double grant, and the fencing
// token refuses A's stale write at the database (0 oversold). With
// lock.Options.Replicas 1, A's grant is never handed out (its WAIT finds
// no replica), so there is nothing to grant twice.
func TestRedisLockFailoverAfterGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover takes seconds; skipped with -short")
	}
	tries := pick(1, 20)
	for _, synced := range []bool{false, true} {
		mode := "redis-lock"
		if synced {
			mode = "redis-lock + replica sync"
		}
		t.Run(fmt.Sprintf("replica-sync=%v", synced), func(t *testing.T) {
			t.Parallel()
			db := testenv.MySQL(t)
			f := &figures{Test: t.Name(), Fault: fmt.Sprintf("redis-lock: Sentinel failover (primary SIGKILLed) right after a grant, the replica's link held so that the grant never reached it; %d forced tries (Requests counts obtains, the 201 column grants)", tries), Stage: mode, Refused: map[string]int{}}
			(&rig{t: t}).record(f)
			for i := 0; i < tries; i++ {
				var res failoverTry
				t.Run(fmt.Sprint("try", i), func(t *testing.T) { res = forceFailoverAfterGrant(t, db, i, synced) })
				if t.Failed() {
					return
				}
				f.Requests += 2
				if res.grantedA {
					f.Successes++
				}
				if res.grantedB {
					f.Successes++
				}
				if res.doubleGrant {
					f.Refused["double grant"]++
				}
				if res.notReplA {
					f.Refused["not replicated"]++
				}
				if res.fenced {
					f.Refused["stale write fenced"]++
				}
				f.Oversold += res.oversold
				switch {
				case !synced && !res.doubleGrant:
					t.Errorf("try %d: the forced window did not hand the lock out twice", i)
				case synced && (res.doubleGrant || !res.notReplA):
					t.Errorf("try %d: with replica sync the lock was handed out twice (%+v)", i, res)
				case res.grantedA && !res.fenced:
					t.Errorf("try %d: the stale holder's write was not fenced off", i)
				case res.oversold > 0:
					t.Errorf("try %d: %d oversold", i, res.oversold)
				}
			}
			t.Logf("%s: %d tries, %v, %d oversold", mode, tries, f.Refused, f.Oversold)
		})
	}
}

// forceFailoverAfterGrant runs forced try number try on a fresh Sentinel
// group, selling product 1, reset to one unit, in db.
func forceFailoverAfterGrant(t *testing.T, db *store.DB, try int, synced bool) failoverTry {
	const id = 1
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	g := testenv.StartSentinelGroup(t)
	// A and B are two instances: each its own failover client, as the
	// app builds it (retries off), and its own lock client. B asks the
	// promoted replica, which has no replica of its own left to confirm
	// a grant, so B never syncs: the question is whether A was handed out.
	locker := func(opts lock.Options) *lock.Client {
		rdb := redis.NewFailoverClient(lock.FailoverOptions(&redis.FailoverOptions{MasterName: g.Master, SentinelAddrs: g.SentinelAddrs(),
			DialTimeout: time.Second, ReadTimeout: time.Second}))
		t.Cleanup(func() { _ = rdb.Close() })
		return testenv.NewLock(t, rdb, opts)
	}
	optsA := lock.Options{}
	if synced {
		optsA = lock.Options{Replicas: 1, ReplicaTimeout: 200 * time.Millisecond}
	}
	lockA, lockB := locker(optsA), locker(lock.Options{})
	items := db.Products()
	if err := items.Reset(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("product:%d", id)
	var res failoverTry

	g.HoldReplication()
	leaseA, err := lockA.Obtain(ctx, key, time.Minute, lock.ObtainOptions{Fixed: true})
	switch {
	case err == nil:
		res.grantedA = true
	case errors.Is(err, lock.ErrNotReplicated) && errors.Is(err, lock.ErrNotObtained):
		res.notReplA = true
	default:
		g.ReleaseReplication()
		t.Fatalf("A's obtain: %v", err)
	}
	var stockA int
	if res.grantedA {
		stockA = enter(t, ctx, items, id, leaseA) // A claims the row and reads, as the stage does
	}
	g.Primary.Kill()
	g.ReleaseReplication()
	g.WaitFailover()

	var leaseB *lock.Lease
	deadline := time.Now().Add(30 * time.Second)
	for leaseB == nil {
		octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
		leaseB, err = lockB.Obtain(octx, key, time.Minute, lock.ObtainOptions{Fixed: true})
		ocancel()
		// Until the client has found the new primary its calls fail;
		// "held" would be an answer, and a wrong one.
		if err != nil && (errors.Is(err, lock.ErrNotObtained) || time.Now().After(deadline)) {
			t.Fatalf("B's obtain on the promoted replica: %v", err)
		}
	}
	res.grantedB = true
	res.doubleGrant = res.grantedA && leaseA.Err() == nil && leaseB.Err() == nil

	// B enters and sells the unit, then A writes the sale it computed from
	// its read.
	sell := func(lease *lock.Lease, user string, stock int) error {
		o := inventory.Order{No: fmt.Sprintf("F%d%s", try, user), ItemID: id, UserID: user, Quantity: 1, Stage: inventory.StageRedisLock,
			Instance: user, CreatedAt: time.Now().UTC(), Status: inventory.StatusConfirmed}
		return items.WriteComputed(ctx, o, stock-1, lease.Token())
	}
	if err := sell(leaseB, "b", enter(t, ctx, items, id, leaseB)); err != nil {
		t.Fatalf("B's sale: %v", err)
	}
	if res.grantedA {
		err := sell(leaseA, "a", stockA)
		switch {
		case errors.Is(err, inventory.ErrLockLost):
			res.fenced = true
		case err != nil && !errors.Is(err, inventory.ErrSoldOut):
			t.Fatalf("A's sale: %v", err)
		}
	}
	a, err := items.Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	res.oversold = a.Oversold()
	for _, l := range []*lock.Lease{leaseA, leaseB} {
		if l != nil {
			_ = l.Release(ctx) // the group goes with the test; a release that finds nothing is fine
		}
	}
	return res
}

// enter is the redis-lock stage's critical section up to the write (see
// inventory's critical.go): claim the row with the lease's fencing token,
// then read the stock.
func enter(t *testing.T, ctx context.Context, items *store.Ledger, id int64, l *lock.Lease) int {
	t.Helper()
	if err := items.Fence(ctx, id, l.Token()); err != nil {
		t.Fatalf("fence with token %d: %v", l.Token(), err)
	}
	n, err := items.ReadStock(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
