package redisstage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// scriptGate holds the reservation scripts sent alone until release (the
// first lone ones, while hold is set), holds the first pipeline of them
// while holdPipe is set, and can set an error on one script of a pipeline
// after Redis answered it. It records the number of scripts of each
// pipeline.
type scriptGate struct {
	sha      string
	release  chan struct{}
	mu       sync.Mutex
	hold     int // lone scripts still to hold
	held     int
	holdPipe bool
	inPipe   chan struct{} // closed when a held pipeline arrives
	pipeGo   chan struct{} // closed to let a held pipeline go
	failAt   int           // 1-based: the pipeline's script to fail; 0: none
	pipes    []int
}

func newScriptGate(t *testing.T, rdb *redis.Client, hold int) *scriptGate {
	t.Helper()
	sha, err := redisstage.ReserveScriptForTest(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	g := &scriptGate{sha: sha, release: make(chan struct{}), hold: hold, inPipe: make(chan struct{}), pipeGo: make(chan struct{})}
	rdb.AddHook(g)
	return g
}

func (g *scriptGate) reserve(c redis.Cmder) bool {
	a := c.Args()
	return c.Name() == "evalsha" && len(a) > 1 && a[1] == g.sha
}

func (g *scriptGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *scriptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if g.reserve(cmd) {
			g.mu.Lock()
			wait := g.hold > 0
			if wait {
				g.hold--
				g.held++
			}
			g.mu.Unlock()
			if wait {
				<-g.release
			}
		}
		return next(ctx, cmd)
	}
}

func (g *scriptGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !g.reserve(cmds[0]) {
			return next(ctx, cmds)
		}
		g.mu.Lock()
		g.pipes = append(g.pipes, len(cmds))
		hold, failAt := g.holdPipe, g.failAt
		g.holdPipe = false
		g.mu.Unlock()
		if hold {
			close(g.inPipe)
			<-g.pipeGo
		}
		err := next(ctx, cmds)
		if failAt > 0 && failAt <= len(cmds) {
			cmds[failAt-1].SetErr(errors.New("ERR the test failed this script"))
		}
		return err
	}
}

func (g *scriptGate) heldNow() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *scriptGate) pipelines() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.pipes...)
}

// batchEnv is one item with a loaded redis-atomic copy of stock units, a
// gate on its client that holds the first two lone scripts (the most the
// stage sends before scripts wait), and the buyers' answers.
type batchEnv struct {
	*streamtest.Env
	ra   *redisstage.RedisAtomic
	gate *scriptGate
}

func newBatchEnv(t *testing.T, stock int) *batchEnv {
	t.Helper()
	e := streamtest.NewEnv(t, testenv.SQLite(t), stock)
	ra := redisstage.NewRedisAtomic(e.RDB, e.DB.Products(), e.NS, nil)
	if err := ra.Reset(context.Background(), e.ID, 0); err != nil {
		t.Fatal(err)
	}
	return &batchEnv{Env: e, ra: ra, gate: newScriptGate(t, e.RDB, 2)}
}

func (e *batchEnv) order(user string) inventory.Order {
	now := time.Now().UTC()
	return inventory.Order{No: "RB-" + user, ItemID: e.ID, UserID: user, Quantity: 1, Stage: inventory.StageRedisAtomic,
		Instance: "rb", CreatedAt: now, WrittenAt: now, Status: inventory.StatusConfirmed}
}

// buy starts a buy for user under ctx; its answer comes on the channel.
func (e *batchEnv) buy(ctx context.Context, user string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.ra.Buy(ctx, e.order(user)) }()
	return done
}

// inFlight starts two buyers whose scripts are held, then n more, and
// waits until those n wait for the next batch.
func (e *batchEnv) inFlight(t *testing.T, ctx context.Context, n int, ctxOf func(i int) context.Context) (lone []<-chan error, queued []<-chan error) {
	t.Helper()
	for i := range 2 {
		lone = append(lone, e.buy(ctx, fmt.Sprintf("lone%d", i)))
	}
	testkit.Eventually(t, "two lone scripts held", 30*time.Second, func() bool { return e.gate.heldNow() == 2 })
	for i := range n {
		// One at a time, so that the batch holds them in this order.
		queued = append(queued, e.buy(ctxOf(i), fmt.Sprintf("q%d", i)))
		testkit.Eventually(t, fmt.Sprintf("%d scripts waiting", i+1), 30*time.Second, func() bool { return e.ra.ReservesWaitingForTest() == i+1 })
	}
	return lone, queued
}

func (e *batchEnv) checkStock(t *testing.T, sold int, stock int) {
	t.Helper()
	ctx := context.Background()
	if err := e.ra.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	if s := e.RedisStock(t); s != stock-sold {
		t.Errorf("Redis copy holds %d, want %d", s, stock-sold)
	}
	if n, err := e.RDB.HLen(ctx, e.Key("pending")).Result(); err != nil || n != 0 {
		t.Errorf("%d reservations pending (%v), want none", n, err)
	}
	a, err := e.DB.Products().Audit(ctx, e.ID)
	if err != nil || a.Sold != sold || !a.Conserved() {
		t.Errorf("audit %+v, %v; want %d sold, conserved", a, err, sold)
	}
}

// TestReservesWaitingBehindTwoLeaveInOnePipeline: while two buyers'
// scripts are in flight, the scripts of the buyers that arrive wait, and
// leave together, in one pipeline, as soon as one of the two ends; every
// buyer gets a unit.
func TestReservesWaitingBehindTwoLeaveInOnePipeline(t *testing.T) {
	const stock, n = 20, 6
	e := newBatchEnv(t, stock)
	ctx := context.Background()
	lone, queued := e.inFlight(t, ctx, n, func(int) context.Context { return ctx })
	close(e.gate.release)
	for _, done := range append(lone, queued...) {
		if err := <-done; err != nil {
			t.Errorf("a buyer: %v", err)
		}
	}
	if got := e.gate.pipelines(); fmt.Sprint(got) != fmt.Sprintf("[%d]", n) {
		t.Errorf("pipelines of reservation scripts %v, want one of %d", got, n)
	}
	e.checkStock(t, n+2, stock)
}

// TestOneScriptsErrorInABatchIsItsBuyersAlone: one script of a pipeline
// fails (its reply an error): its buyer alone hears it, as unavailable, and
// writes no order; the others of the batch buy.
func TestOneScriptsErrorInABatchIsItsBuyersAlone(t *testing.T) {
	const stock, n = 20, 4
	e := newBatchEnv(t, stock)
	e.gate.failAt = 2 // the second of the pipeline: q1
	ctx := context.Background()
	lone, queued := e.inFlight(t, ctx, n, func(int) context.Context { return ctx })
	close(e.gate.release)
	for _, done := range lone {
		if err := <-done; err != nil {
			t.Errorf("a lone buyer: %v", err)
		}
	}
	for i, done := range queued {
		err := <-done
		if i == 1 {
			if !errors.Is(err, inventory.ErrUnavailable) {
				t.Errorf("the buyer whose script failed: %v, want unavailable", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("buyer q%d, batched with a script that failed: %v", i, err)
		}
	}
	if _, err := e.DB.Products().FindOrder(ctx, e.order("q1").No); !errors.Is(err, inventory.ErrOrderNotFound) {
		t.Errorf("the failed script's buyer: order lookup %v, want none written", err)
	}
	// Its script ran (the error was the test's, set after Redis answered):
	// the reconcile job gives its unit back, as for any lost reply.
	if err := e.ra.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := e.ra.Repair(ctx, e.ID, 0, e.DB.Products().OrderExists)
	if err != nil || d.Resolved != 1 {
		t.Fatalf("repair: %+v, %v; want the failed buyer's reservation settled", d, err)
	}
	e.checkStock(t, n+1, stock)
}

// TestBuyerLeavingBeforeItsBatchLeftTakesNothing: a buyer whose request
// ends while its script waits for the next batch leaves at once, with its
// context's error, and its script is never sent: the batch holds the
// others', and nothing was taken for it.
func TestBuyerLeavingBeforeItsBatchLeftTakesNothing(t *testing.T) {
	const stock, n = 20, 4
	e := newBatchEnv(t, stock)
	ctx := context.Background()
	leaving, cancel := context.WithCancel(ctx)
	defer cancel()
	lone, queued := e.inFlight(t, ctx, n, func(i int) context.Context {
		if i == 0 {
			return leaving
		}
		return ctx
	})
	cancel()
	if err := <-queued[0]; !errors.Is(err, context.Canceled) {
		t.Errorf("the leaving buyer: %v, want context.Canceled", err)
	}
	close(e.gate.release)
	for _, done := range append(lone, queued[1:]...) {
		if err := <-done; err != nil {
			t.Errorf("a buyer: %v", err)
		}
	}
	if got := e.gate.pipelines(); fmt.Sprint(got) != fmt.Sprintf("[%d]", n-1) {
		t.Errorf("pipelines of reservation scripts %v, want one of %d, without the leaver's", got, n-1)
	}
	if in, err := e.RDB.SIsMember(ctx, e.Key("buyers"), "q0").Result(); err != nil || in {
		t.Errorf("the leaver is among the item's buyers in Redis (%v, %v), want not", in, err)
	}
	e.checkStock(t, n+1, stock)
}

// TestBuyerCancelledInItsBatchLearnsTheTruth: a buyer whose request is
// cancelled while its batch is in flight does not leave before the
// answer: its script took a unit, so it goes on to the write, which its
// ended request refuses, and it gives the unit back. It is told it did
// not buy, and it did not: no order, the unit back in the copy.
func TestBuyerCancelledInItsBatchLearnsTheTruth(t *testing.T) {
	const stock, n = 20, 4
	e := newBatchEnv(t, stock)
	e.gate.holdPipe = true
	ctx := context.Background()
	leaving, cancel := context.WithCancel(ctx)
	defer cancel()
	// The two lone scripts are held; their release lets the pipeline go,
	// which is held in its turn before Redis.
	lone, queued := e.inFlight(t, ctx, n, func(i int) context.Context {
		if i == 0 {
			return leaving
		}
		return ctx
	})
	close(e.gate.release)
	for _, done := range lone {
		if err := <-done; err != nil {
			t.Errorf("a lone buyer: %v", err)
		}
	}
	<-e.gate.inPipe // the batch, with the leaver's script, is in flight
	cancel()
	close(e.gate.pipeGo)
	if err := <-queued[0]; err == nil {
		t.Errorf("the cancelled buyer bought, want refused")
	}
	for _, done := range queued[1:] {
		if err := <-done; err != nil {
			t.Errorf("a buyer: %v", err)
		}
	}
	if _, err := e.DB.Products().FindOrder(ctx, e.order("q0").No); !errors.Is(err, inventory.ErrOrderNotFound) {
		t.Errorf("the cancelled buyer: order lookup %v, want none written", err)
	}
	e.checkStock(t, n+1, stock)
}
