package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// Every Obtain of a reentrant Owner writes the same owner into the lock, so
// a try of its whose outcome is unknown cannot be released by owner: that
// could give back a hold of an earlier lease. Each try must give back the
// hold it added, and that one only: the reply lost after Redis ran the try
// (the hold was added), or the try held back in the network until after
// its clean-up (it must then add nothing). Either way, once the outer
// lease, if any, is released, the lock must be free, not held by nobody
// until its TTL.
func TestReentrantTryOfUnknownOutcomeGivesItsHoldBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := &testkit.NetFaults{}
	rdb := faultyClient(t, d, *lock.ClientOptions(&redis.Options{}))
	c, prefix := newClient(t, rdb, lock.Options{})
	// Load the scripts, so that each call below is one EVALSHA.
	for _, fair := range []bool{false, true} {
		o := lock.ObtainOptions{Owner: "warm-up", Fair: fair}
		outer := mustObtain(t, c, ctx, "warm-up", time.Second, o)
		mustRelease(t, mustObtain(t, c, ctx, "warm-up", time.Second, o))
		mustRelease(t, outer)
	}
	for _, fair := range []bool{false, true} {
		script := "obtain"
		if fair {
			script = "fair-obtain"
		}
		for _, outerHold := range []bool{true, false} {
			for _, fault := range []string{"reply lost", "held back"} {
				key := fmt.Sprintf("fair=%v,outer=%v,%s", fair, outerHold, fault)
				t.Run(key, func(t *testing.T) {
					o := lock.ObtainOptions{Owner: "job-1", Fair: fair}
					var outer *lock.Lease
					var held string
					if outerHold {
						outer = mustObtain(t, c, ctx, key, time.Minute, o)
						held = record(t, rdb, prefix, key)
					}
					before := d.Dropped() + d.Held()
					if fault == "reply lost" {
						d.Drop(1, scriptCall(script, prefix, key))
					} else {
						d.Delay(1, scriptCall(script, prefix, key))
					}
					if l, err := c.Obtain(ctx, key, time.Minute, o); err == nil {
						mustRelease(t, l)
						t.Fatal("Obtain succeeded although its reply never came")
					}
					if d.Dropped()+d.Held() == before {
						t.Fatal("the try was neither dropped nor held back")
					}
					// The clean-up ran before Obtain returned; a try held
					// back lands only now.
					if err := d.Deliver(); err != nil {
						t.Fatal(err)
					}
					if v := record(t, rdb, prefix, key); v != held {
						t.Fatalf("after the failed try, the lock is %q, want %q (the outer hold alone, or free)", v, held)
					}
					if outer != nil {
						mustRelease(t, outer)
					}
					if v := record(t, rdb, prefix, key); v != "" {
						t.Errorf("every lease of the owner is released, yet the lock is held: %q", v)
					}
				})
			}
		}
	}
}

// A reentrant RedLock try that an instance answers late, or whose answer is
// lost, must add no hold that outlives its lease on that instance: neither
// when the lease was obtained (the late instance is released with it) nor
// when the attempt failed (the instance is cleaned up). The owner's outer
// lease keeps its own hold on every instance until it is released, and
// then every instance is free.
func TestRedLockReentrantLateGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := lock.ObtainOptions{Owner: "job-1"}
	const key = "k"
	// holds waits until each instance in is holds the lock and returns
	// their records.
	holds := func(t *testing.T, q *quorum, in []int) map[int]string {
		t.Helper()
		out := map[int]string{}
		for _, i := range in {
			testkit.Eventually(t, fmt.Sprintf("instance %d to grant the outer lease", i), 10*time.Second, func() bool {
				out[i] = record(t, q.clients[i], "lock:", key)
				return strings.HasSuffix(out[i], "|1")
			})
		}
		return out
	}
	// check compares each instance's record with want.
	check := func(t *testing.T, q *quorum, when string, want map[int]string) {
		t.Helper()
		for i, w := range want {
			if v := record(t, q.clients[i], "lock:", key); v != w {
				t.Errorf("%s, instance %d holds %q, want %q", when, i, v, w)
			}
		}
	}
	t.Run("obtained, grant after the release", func(t *testing.T) {
		t.Parallel()
		q := newQuorum(t)
		gate := q.r.Gate(key)
		late := (gate + 1) % 3
		outer := mustObtain(t, q.r, ctx, key, time.Minute, o)
		all := holds(t, q, []int{0, 1, 2})
		q.faults[late].Delay(1, scriptCall("obtain", "lock:", key))
		inner := mustObtain(t, q.r, ctx, key, time.Minute, o)
		testkit.Eventually(t, "the late instance's try to be held back", 10*time.Second, func() bool { return q.faults[late].Held() == 1 })
		released := q.releases[late].Load()
		if err := inner.Release(ctx); err != nil {
			t.Fatalf("release the inner lease: %v", err)
		}
		testkit.Eventually(t, "the inner release to reach the late instance", 10*time.Second, func() bool { return q.releases[late].Load() > released })
		if err := q.faults[late].Deliver(); err != nil {
			t.Fatal(err)
		}
		check(t, q, "with the inner lease released and its late try landed", all)
		mustRelease(t, outer)
		check(t, q, "with both leases released", map[int]string{0: "", 1: "", 2: ""})
	})
	for _, fault := range []string{"reply lost", "held back"} {
		t.Run("failed, gate's "+fault, func(t *testing.T) {
			t.Parallel()
			q := newQuorum(t)
			gate := q.r.Gate(key)
			dead, other := (gate+1)%3, (gate+2)%3
			q.servers[dead].Kill() // so that the re-entry fails: two instances grant it at most
			outer := mustObtain(t, q.r, ctx, key, time.Minute, o)
			live := holds(t, q, []int{gate, other})
			released := [3]int32{q.releases[gate].Load(), 0, q.releases[other].Load()}
			if fault == "reply lost" {
				q.faults[gate].Drop(1, scriptCall("obtain", "lock:", key))
			} else {
				q.faults[gate].Delay(1, scriptCall("obtain", "lock:", key))
			}
			if l, err := q.r.Obtain(ctx, key, time.Minute, o); err == nil {
				mustRelease(t, l)
				t.Fatal("Obtain succeeded with one instance dead and the gate's answer missing")
			}
			if q.faults[gate].Dropped()+q.faults[gate].Held() != 1 {
				t.Fatal("the gate's try was neither dropped nor held back")
			}
			testkit.Eventually(t, "the failed attempt to be given back on both live instances", 10*time.Second, func() bool {
				return q.releases[gate].Load() > released[0] && q.releases[other].Load() > released[2]
			})
			if err := q.faults[gate].Deliver(); err != nil {
				t.Fatal(err)
			}
			check(t, q, "after the failed re-entry", live)
			mustRelease(t, outer)
			check(t, q, "with the outer lease released", map[int]string{gate: "", other: ""})
		})
	}
}

// An Owner that contains the record's separator, even at its start, works
// like any other owner.
func TestOwnerWithSeparator(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, testRedis(t), lock.Options{})
	ctx := context.Background()
	for i, owner := range []string{"|x", "|", "a|b", "x|1|1", "x|1|1w", "w", "||"} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			key := fmt.Sprintf("k%d", i)
			o := lock.ObtainOptions{Owner: owner}
			outer := mustObtain(t, c, ctx, key, time.Second, o)
			inner := mustObtain(t, c, ctx, key, time.Second, o)
			if inner.Token() != outer.Token() {
				t.Fatalf("owner %q: re-entered token %d, want %d", owner, inner.Token(), outer.Token())
			}
			if _, err := c.Obtain(ctx, key, time.Second, lock.ObtainOptions{}); !errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("owner %q holds the lock; another obtain got %v, want ErrNotObtained", owner, err)
			}
			mustRelease(t, inner)
			mustRelease(t, outer)
			next := mustObtain(t, c, ctx, key, time.Second, lock.ObtainOptions{})
			if next.Token() <= outer.Token() {
				t.Fatalf("token did not increase after owner %q: %d then %d", owner, outer.Token(), next.Token())
			}
			mustRelease(t, next)
		})
	}
}
