package admission

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestResetWaitsOutTheLease: an instance that remembers an epoch and never
// hears the bump (paused, or its subscription dead and not yet noticed:
// here it is marked subscribed with no subscription at all) still reads
// the new epoch once the bumping instance's Settle has returned.
func TestResetWaitsOutTheLease(t *testing.T) {
	addr := testenv.StartRedis(t).Addr
	a, b := redis.NewClient(&redis.Options{Addr: addr}), redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	const lease = 300 * time.Millisecond
	deaf, bumper := NewRedisEpochs(a, a, lease), NewRedisEpochs(b, b, lease)
	deaf.drop(true) // trusts its memory, hears nothing
	ctx := context.Background()
	item := testenv.Name("epoch-item")
	old, err := deaf.Epoch(ctx, item)
	if err != nil {
		t.Fatal(err)
	}
	if err := bumper.Bump(ctx, item); err != nil {
		t.Fatal(err)
	}
	if err := bumper.Settle(ctx, item); err != nil {
		t.Fatal(err)
	}
	v, err := deaf.Epoch(ctx, item)
	if err != nil {
		t.Fatal(err)
	}
	if v == old {
		t.Fatalf("after the reset settled, an instance that missed its announcement still trusts the old epoch %q", old)
	}
}

// commandCounter counts the commands a client sends.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// TestEpochsForgetWhatTheLeaseNoLongerCovers: an instance that read the
// epochs of 1,000 items and bumped 10 keeps 1,000 entries until a lease
// has passed, and none after DropStale, which sends nothing to Redis. An
// item asked for again reads its epoch afresh: the same value, still
// trusted for a lease.
func TestEpochsForgetWhatTheLeaseNoLongerCovers(t *testing.T) {
	addr := testenv.StartRedis(t).Addr
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	counter := &commandCounter{}
	rdb.AddHook(counter)
	const lease = time.Second
	now := time.Unix(1_000, 0)
	e := NewRedisEpochs(rdb, rdb, lease)
	e.SetClock(func() time.Time { return now })
	e.drop(true) // subscribed: remembered epochs are trusted
	ctx := context.Background()
	prefix := testenv.Name("stale")
	item := func(i int) string { return prefix + ":" + strconv.Itoa(i) }
	first := map[string]string{}
	for i := range 1000 {
		v, err := e.Epoch(ctx, item(i))
		if err != nil {
			t.Fatal(err)
		}
		first[item(i)] = v
	}
	for i := range 10 {
		if err := e.Bump(ctx, item(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.Tracked(); n != 1010 {
		t.Fatalf("after 1,000 reads and 10 bumps: %d entries, want 1010", n)
	}
	now = now.Add(lease - time.Nanosecond)
	e.DropStale()
	if n := e.Tracked(); n != 1010 {
		t.Fatalf("within the lease DropStale left %d entries of 1010", n)
	}
	now = now.Add(time.Nanosecond)
	sent := counter.n.Load()
	e.DropStale()
	if n := e.Tracked(); n != 0 {
		t.Fatalf("a lease after the reads and bumps DropStale left %d entries, want 0", n)
	}
	if d := counter.n.Load() - sent; d != 0 {
		t.Fatalf("DropStale sent %d Redis commands, want 0", d)
	}
	v, err := e.Epoch(ctx, item(3))
	if err != nil {
		t.Fatal(err)
	}
	if v != first[item(3)] {
		t.Fatalf("an item asked for again read epoch %q, want %q (nothing was bumped)", v, first[item(3)])
	}
	sent = counter.n.Load()
	if _, err := e.Epoch(ctx, item(3)); err != nil || counter.n.Load() != sent {
		t.Fatalf("the epoch read again is trusted from memory: err %v, %d commands", err, counter.n.Load()-sent)
	}
}
