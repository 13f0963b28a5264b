package redisstage_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// giveBackHold is a Redis hook that holds redis-sharded's give-back
// scripts before they are sent, as a Redis that stopped answering would,
// until release or until the command's own context ends.
type giveBackHold struct {
	sha     string
	holding atomic.Int32
	release chan struct{}
	once    sync.Once
}

func (h *giveBackHold) unblock() { h.once.Do(func() { close(h.release) }) }

func (h *giveBackHold) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *giveBackHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *giveBackHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if name := strings.ToLower(cmd.Name()); (name == "evalsha" || name == "eval") && len(args) > 1 && args[1] == h.sha {
			h.holding.Add(1)
			select {
			case <-h.release:
				h.holding.Add(-1)
			case <-ctx.Done():
				h.holding.Add(-1)
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// TestShardedGiveBackDoesNotHoldTheAnswerPastTheDeadline: a redis-sharded
// buy whose database write fails at its deadline gives its units back to
// the buckets. When Redis does not answer that give-back, the buyer must
// still hear its error at the deadline (and a short grace), not after the
// give-back's own 2 s: on serve, with Redis SIGSTOPped mid-sale, buyers
// under a 4 s deadline were answered after 6.2 s. The give-back still
// lands once Redis answers.
func TestShardedGiveBackDoesNotHoldTheAnswerPastTheDeadline(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), 4)
	hold := &giveBackHold{sha: redisstage.GiveBackScriptForTest(), release: make(chan struct{})}
	t.Cleanup(hold.unblock)
	e.rdb.AddHook(hold)
	const user = "late-writer"
	release := e.held.holdUser(user)
	cue := testkit.NewCueDeadline()
	answered := make(chan error, 1)
	go func() {
		_, err := e.svc.Buy(cue, inventory.StageRedisSharded, inventory.Request{ItemID: e.id, UserID: user, Quantity: 1})
		answered <- err
	}()
	<-e.held.entered
	cue.Fall()
	release <- context.DeadlineExceeded // the write ran out of time: nothing written
	answeredWhileGiveBackHeld(t, answered, hold)
	testkit.Eventually(t, "the unit back in the buckets", 30*time.Second, func() bool {
		stock, inFlight := e.buckets()
		sum := 0
		for _, n := range stock {
			sum += n
		}
		return sum == 4 && inFlight == 0
	})
	e.audit(0)
}

// TestAtomicGiveBackDoesNotHoldTheAnswerPastTheDeadline: the same for
// redis-atomic, whose buy gives its reservation back when its database
// write fails.
func TestAtomicGiveBackDoesNotHoldTheAnswerPastTheDeadline(t *testing.T) {
	db := testenv.SQLite(t)
	rdb := testenv.Redis(t)
	held := &heldStore{Ledger: db.Products(), hold: map[string]chan error{}, entered: make(chan string, 16)}
	stage := redisstage.NewRedisAtomic(rdb, held, testenv.Name("at-"), nil)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisAtomic: stage}, "a", "O")
	ctx := context.Background()
	if err := svc.Reset(ctx, 1, 4); err != nil {
		t.Fatal(err)
	}
	hold := &giveBackHold{sha: redisstage.AtomicGiveBackScriptForTest(), release: make(chan struct{})}
	t.Cleanup(hold.unblock)
	rdb.AddHook(hold)
	const user = "late-writer"
	release := held.holdUser(user)
	cue := testkit.NewCueDeadline()
	answered := make(chan error, 1)
	go func() {
		_, err := svc.Buy(cue, inventory.StageRedisAtomic, inventory.Request{ItemID: 1, UserID: user, Quantity: 1})
		answered <- err
	}()
	<-held.entered
	cue.Fall()
	release <- context.DeadlineExceeded
	answeredWhileGiveBackHeld(t, answered, hold)
	testkit.Eventually(t, "the unit back in the copy", 30*time.Second, func() bool {
		// Stale only after an hour: the give-back itself must return it.
		d, err := stage.Repair(ctx, 1, time.Hour, func(context.Context, string) (bool, error) { return false, nil })
		return err == nil && !d.Busy && !d.Repaired && d.Resolved == 0 && d.RedisStock == 4 && d.DBStock == 4
	})
}

// answeredWhileGiveBackHeld waits for the buy whose write failed, which
// must answer a failure, and checks that its answer came while its
// give-back was still held by a Redis that did not answer; then it lets
// the give-back through.
func answeredWhileGiveBackHeld(t *testing.T, answered <-chan error, hold *giveBackHold) {
	t.Helper()
	select {
	case err := <-answered:
		if err == nil {
			t.Fatal("the buy whose write failed answered success")
		}
	case <-time.After(time.Minute):
		t.Fatal("the buy was never answered")
	}
	if hold.holding.Load() == 0 {
		t.Fatal("the buyer heard its answer only once the give-back had given up on a Redis that did not answer: the answer waited past the request's deadline")
	}
	hold.unblock()
}
