package admission

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// The sold-out memory against a Redis that restarts from an older snapshot.

// watching starts e's subscription for the test and waits until it is up.
func watching(t *testing.T, e *RedisEpochs) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Watch(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testkit.Eventually(t, "the epoch subscription is up", 10*time.Second, e.Subscribed)
}

// fakeStock is a durable store's stock of one item (MySQL's row), sold by
// a stage that takes units while there are any.
type fakeStock struct {
	units atomic.Int64
	calls atomic.Int64
}

func (s *fakeStock) Buy(_ context.Context, o inventory.Order) error {
	s.calls.Add(1)
	for {
		n := s.units.Load()
		if n < int64(o.Quantity) {
			return inventory.ErrSoldOut
		}
		if s.units.CompareAndSwap(n, n-int64(o.Quantity)) {
			return nil
		}
	}
}

// TestRememberedSellOutOutlivesARedisRestartFromASnapshot: RedisEpochs
// says that "memory never outlives the data it was checked against", and
// a lost subscription drops every remembered epoch. But Crowd's sold-out
// marks are not epochs: they live forever, keyed by the epoch value. A
// Redis that restarts from a snapshot (RDB save points, AOF everysec, or
// a failover to a replica that had not received the bump) comes back with
// the epoch from before the reset, and every mark made under it is valid
// again. The database kept the reset, so the item has stock, and nothing
// will ever bump it again: the instance answers 409 from memory forever.
//
// Forced order: sell out on A (mark under E1), SAVE (a snapshot with E1),
// reset on B (stock back, bump to E2, Settle returns), kill Redis, wait
// until A has noticed its subscription is gone, start Redis again from that
// snapshot, poll until A reads its old epoch again.
func TestRememberedSellOutOutlivesARedisRestartFromASnapshot(t *testing.T) {
	srv := testenv.StartRedis(t)
	ca := redis.NewClient(&redis.Options{Addr: srv.Addr})
	cb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = ca.Close(); _ = cb.Close() })
	// Longer than a read of the epoch takes beside CPU hogs: a read that
	// outlives the lease is no epoch at all, and the losers below would
	// not be answered from memory (stress runs failed so at 50ms).
	const lease = time.Second
	ea, eb := NewRedisEpochs(ca, ca, lease), NewRedisEpochs(cb, cb, lease)
	watching(t, ea)
	watching(t, eb)
	ctx := context.Background()

	db := &fakeStock{} // sold out
	crowdA := NewCrowd(CrowdOptions{Epochs: ea, Kind: "product"})
	crowdB := NewCrowd(CrowdOptions{Epochs: eb, Kind: "product"})
	a := crowdA.Wrap(db)
	order := func(user string) inventory.Order {
		return inventory.Order{No: testenv.Name("o"), ItemID: 1, UserID: user, Quantity: 1}
	}

	if err := a.Buy(ctx, order("l1")); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("first loser: %v", err)
	}
	e1, err := ea.Epoch(ctx, "product:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Buy(ctx, order("l2")); !errors.Is(err, inventory.ErrSoldOut) || db.calls.Load() != 1 {
		t.Fatalf("second loser: %v after %d stage calls; want sold out from memory", err, db.calls.Load())
	}

	// A snapshot of Redis, as a save point takes one at any moment.
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// The reset on instance B, as Service.Reset runs it: new stock in the
	// database, then Crowd.reopened (Restocked, then Settle).
	db.units.Store(1)
	if err := crowdB.Restocked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := eb.Settle(ctx, "product:1"); err != nil {
		t.Fatal(err)
	}
	if v, err := ea.Epoch(ctx, "product:1"); err != nil || v == e1 {
		t.Fatalf("after the reset A reads %q, %v; want a new epoch", v, err)
	}

	// Redis dies and comes back from its snapshot, with the old epoch.
	// A notices its subscription is gone before Redis is back (what this
	// test covers; TestEpochReadAfterAnUnnoticedRestartEndsRememberedSellOuts
	// covers a read on a fresh connection before the watcher notices).
	srv.Kill()
	testkit.Eventually(t, "A notices its subscription is gone", 20*time.Second, func() bool { return !ea.Subscribed() })
	srv.Restart()
	// The stored value is the one before the reset again (Epoch adds the
	// subscription's session after a '/').
	stored := func(v string) string { s, _, _ := strings.Cut(v, "/"); return s }
	testkit.Eventually(t, "A reads the item's old epoch again after the restart", 20*time.Second, func() bool {
		v, err := ea.Epoch(ctx, "product:1")
		return err == nil && stored(v) == stored(e1)
	})
	calls := db.calls.Load()
	err = a.Buy(ctx, order("after-restart"))
	if err != nil {
		t.Fatalf("the reset returned and the database holds 1 unit, yet A answers %v (stage calls: %d before, %d after): "+
			"a sold-out mark made under the epoch of before the reset is trusted again once Redis came back from a snapshot, "+
			"and no later bump will ever come", err, calls, db.calls.Load())
	}
}

// TestEpochReadAfterAnUnnoticedRestartEndsRememberedSellOuts: the case
// TestRememberedSellOutOutlivesARedisRestartFromASnapshot leaves out. Redis
// restarts from a snapshot taken before a reset, and instance A reads the
// item's epoch on a fresh connection before its watcher has noticed that
// its subscription is gone. Here A is marked subscribed with no
// subscription at all (as in TestResetWaitsOutTheLease), so it never
// notices: its first read from the restarted server must already end the
// sell-outs it remembered under that epoch before the reset.
//
// Forced order: sell out on A (mark under E1), SAVE (a snapshot with E1),
// reset on B (stock back in the database, bump to E2, Settle returns), A
// reads E2, kill Redis and start it again from the snapshot, poll until A
// reads E1 again, then buy on A.
func TestEpochReadAfterAnUnnoticedRestartEndsRememberedSellOuts(t *testing.T) {
	srv := testenv.StartRedis(t)
	ca := redis.NewClient(&redis.Options{Addr: srv.Addr})
	cb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = ca.Close(); _ = cb.Close(); _ = admin.Close() })
	// Longer than a read of the epoch takes beside CPU hogs: a read that
	// outlives the lease is no epoch at all, and the losers below would
	// not be answered from memory (stress runs failed so at 50ms).
	const lease = time.Second
	ea, eb := NewRedisEpochs(ca, ca, lease), NewRedisEpochs(cb, cb, lease)
	ea.drop(true) // trusts its memory; its watcher never notices anything
	ctx := context.Background()

	db := &fakeStock{} // sold out
	crowdA := NewCrowd(CrowdOptions{Epochs: ea, Kind: "product"})
	crowdB := NewCrowd(CrowdOptions{Epochs: eb, Kind: "product"})
	a := crowdA.Wrap(db)
	order := func(user string) inventory.Order {
		return inventory.Order{No: testenv.Name("o"), ItemID: 1, UserID: user, Quantity: 1}
	}
	if err := a.Buy(ctx, order("l1")); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("first loser: %v", err)
	}
	if err := a.Buy(ctx, order("l2")); !errors.Is(err, inventory.ErrSoldOut) || db.calls.Load() != 1 {
		t.Fatalf("second loser: %v after %d stage calls; want sold out from memory", err, db.calls.Load())
	}
	e1, err := ea.Epoch(ctx, "product:1")
	if err != nil {
		t.Fatal(err)
	}
	stored := func(v string) string { s, _, _ := strings.Cut(v, "/"); return s }
	if err := admin.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	db.units.Store(1)
	if err := crowdB.Restocked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := eb.Settle(ctx, "product:1"); err != nil {
		t.Fatal(err)
	}
	if v, err := ea.Epoch(ctx, "product:1"); err != nil || stored(v) == stored(e1) {
		t.Fatalf("after the reset A reads %q, %v; want a new epoch", v, err)
	}

	srv.Kill()
	srv.Restart()
	testkit.Eventually(t, "A reads the item's old epoch again from the restarted Redis", 20*time.Second, func() bool {
		v, err := ea.Epoch(ctx, "product:1")
		return err == nil && stored(v) == stored(e1)
	})
	calls := db.calls.Load()
	if err := a.Buy(ctx, order("after-restart")); err != nil {
		v, _ := ea.Epoch(ctx, "product:1")
		t.Fatalf("the reset returned and the database holds 1 unit, yet A answers %v (stage calls: %d before, %d after; "+
			"epoch %q before the reset, %q now): its first read from a Redis restarted from an older snapshot brought "+
			"back the epoch of before the reset, with nothing to tell the two apart", err, calls, db.calls.Load(), e1, v)
	}
}
