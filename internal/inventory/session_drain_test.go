package inventory_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// redisExchanges counts the exchanges a client has with Redis (a command,
// or a pipeline of them), not those that set a new connection up, and
// calls saw with the keys of each.
type redisExchanges struct {
	n   atomic.Int64
	saw func(keys []string)
}

func (h *redisExchanges) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *redisExchanges) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.seen(cmd)
		return next(ctx, cmd)
	}
}

func (h *redisExchanges) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.seen(cmds...)
		return next(ctx, cmds)
	}
}

func (h *redisExchanges) seen(cmds ...redis.Cmder) {
	if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() != "hello" && c.Name() != "client" }) {
		return // a new connection's own set-up
	}
	h.n.Add(1)
	if h.saw == nil {
		return
	}
	var keys []string
	for _, c := range cmds {
		for _, a := range c.Args() {
			if s, ok := a.(string); ok {
				keys = append(keys, s)
			}
		}
	}
	h.saw(keys)
}

// beforeCommit is a catalog that calls before as a session is about to
// be written, and writes it only when before returns nil.
type beforeCommit struct {
	*store.Ledger
	before func() error
}

func (c beforeCommit) ResetSession(ctx context.Context, items []inventory.SessionItem, w inventory.SaleWindow) error {
	if err := c.before(); err != nil {
		return err
	}
	return c.Ledger.ResetSession(ctx, items, w)
}

// sessionOf is a session of n items restocked to 3: the rig's item at
// index at (at < 0: not in it), and items that have no orders.
func sessionOf(e *streamtest.Env, n, at int) []inventory.SessionItem {
	items := make([]inventory.SessionItem, n)
	for i := range items {
		items[i] = inventory.SessionItem{ID: 1000 + int64(i), Stock: 3}
	}
	if at >= 0 {
		items[at].ID = e.ID
	}
	return items
}

var errStopped = errors.New("stopped before the commit")

// TestSessionDrainsItsQueuesInExchangesThatDoNotGrowWithItsItems: under
// redis-stream a session waits until no order of its items is queued
// before it writes; it asks Redis about all its items together, in as
// many exchanges for 200 items as for one. Asked item by item, a
// 1,000-item session spent half its request deadline before its commit.
func TestSessionDrainsItsQueuesInExchangesThatDoNotGrowWithItsItems(t *testing.T) {
	e := streamtest.NewEnv(t, testenv.SQLite(t), 10)
	in := e.Instance("a", inventory.Lifecycle{})
	count := &redisExchanges{}
	e.RDB.AddHook(count)
	var before atomic.Int64
	svc := inventory.NewService(beforeCommit{Ledger: e.DB.Products(), before: func() error {
		before.Store(count.n.Load())
		return errStopped
	}}, map[string]inventory.Stage{inventory.StageRedisStream: in.Stream}, "a", "O").
		WithLifecycle(inventory.Lifecycle{RedisStock: in.RedisStock, Queue: in.Stream})
	exchanges := map[int]int64{}
	for _, n := range []int{1, 200} {
		start := count.n.Load()
		if err := svc.ScheduleSession(context.Background(), sessionOf(e, n, -1), inventory.SaleWindow{}); !errors.Is(err, errStopped) {
			t.Fatalf("a session of %d items: %v, want it stopped before its commit", n, err)
		}
		exchanges[n] = before.Load() - start
	}
	if exchanges[1] < 1 || exchanges[200] != exchanges[1] {
		t.Errorf("before its commit a session of 1 item had %d exchanges with Redis, one of 200 items %d; want the same, at least one", exchanges[1], exchanges[200])
	}
}

// TestSessionWaitsForTheQueueOfEachOfItsItems: orders queued for item
// 137 of a 200-item session, and not written yet, are written before the
// session writes: the session waits until its drain has seen them queued,
// and the writer is started only then.
func TestSessionWaitsForTheQueueOfEachOfItsItems(t *testing.T) {
	const queued = 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := streamtest.NewEnv(t, testenv.SQLite(t), 10)
	in := e.Instance("a", inventory.Lifecycle{})
	streamtest.BuyN(t, in.Service, inventory.StageRedisStream, "q", queued)
	queue := in.Stream.QueueKeys(e.ID).Queued
	asked := make(chan struct{})
	var once sync.Once
	e.RDB.AddHook(&redisExchanges{saw: func(keys []string) {
		if slices.Contains(keys, queue) {
			once.Do(func() { close(asked) })
		}
	}})
	var backlog atomic.Int64
	backlog.Store(-1)
	svc := inventory.NewService(beforeCommit{Ledger: e.DB.Products(), before: func() error {
		n, _, err := in.Stream.Backlog(ctx, e.ID)
		if err != nil {
			return err
		}
		backlog.Store(int64(n))
		return errStopped
	}}, map[string]inventory.Stage{inventory.StageRedisStream: in.Stream}, "a", "O").
		WithLifecycle(inventory.Lifecycle{RedisStock: in.RedisStock, Queue: in.Stream})
	done := make(chan error, 1)
	go func() { done <- svc.ScheduleSession(ctx, sessionOf(e, 200, 136), inventory.SaleWindow{}) }()
	select {
	case <-asked:
	case err := <-done:
		t.Fatalf("the session ended (%v) before it asked about the queue of its item 137", err)
	}
	streamtest.StartWriter(t, ctx, in.Stream, e.DB.Products(), orderwriter.Options{Consumer: "a", Poll: 10 * time.Millisecond})
	if err := <-done; !errors.Is(err, errStopped) {
		t.Fatalf("the session: %v, want it stopped before its commit", err)
	}
	if n := backlog.Load(); n != 0 {
		t.Fatalf("the session came to its commit with %d orders of its item 137 still queued", n)
	}
	a, err := in.Service.Audit(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != queued {
		t.Errorf("audit %+v: %d orders written before the session's commit, want %d", a, a.Orders, queued)
	}
}
