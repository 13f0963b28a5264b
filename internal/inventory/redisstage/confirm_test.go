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
)

// buyerMark marks the context of the buyer whose commands a test counts.
type buyerMark struct{}

// buyerPath counts the commands and pipelines sent under a context that
// carries buyerMark: the ones a buyer's request waits for. It keeps the
// names of every command sent, under any context; failPipelines makes every
// pipeline fail unsent.
type buyerPath struct {
	mu            sync.Mutex
	trips         []string // the buyer's: a pipeline is one, "[a b]"
	all           []string
	failPipelines bool
}

func (h *buyerPath) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *buyerPath) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.seen(ctx, cmd.Name(), cmd)
		return next(ctx, cmd)
	}
}

func (h *buyerPath) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, c := range cmds {
			names = append(names, c.Name())
		}
		h.seen(ctx, fmt.Sprint(names), cmds...)
		h.mu.Lock()
		fail := h.failPipelines
		h.mu.Unlock()
		if fail {
			return errors.New("the test dropped this pipeline")
		}
		return next(ctx, cmds)
	}
}

func (h *buyerPath) seen(ctx context.Context, trip string, cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx.Value(buyerMark{}) != nil {
		h.trips = append(h.trips, trip)
	}
	for _, c := range cmds {
		h.all = append(h.all, c.Name())
	}
}

func (h *buyerPath) take() (trips, all []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	trips, all = h.trips, h.all
	h.trips, h.all = nil, nil
	return trips, all
}

// confirmEnv is one item with a loaded redis-atomic copy, and a counting
// hook on the stage's client.
func confirmEnv(t *testing.T, stock int) (*streamtest.Env, *redisstage.RedisAtomic, *inventory.Service, *buyerPath) {
	t.Helper()
	e := streamtest.NewEnv(t, testenv.SQLite(t), stock)
	count := &buyerPath{}
	e.RDB.AddHook(count)
	ra := redisstage.NewRedisAtomic(e.RDB, e.DB.Products(), e.NS, nil)
	svc := inventory.NewService(e.DB.Products(), map[string]inventory.Stage{inventory.StageRedisAtomic: ra}, "c", "O")
	// The first sale loads the copy and the script; the tests count the
	// ones after it.
	if _, err := svc.Buy(context.Background(), inventory.StageRedisAtomic, inventory.Request{ItemID: e.ID, UserID: "warm", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	if err := ra.WaitConfirms(context.Background()); err != nil {
		t.Fatal(err)
	}
	count.take()
	return e, ra, svc, count
}

// TestKeylessSaleIsOneRoundTripOnTheBuyersPath: a sale without a key, of
// an item already loaded, waits for one command to Redis, the reservation
// script; the confirm of its reservation leaves afterwards, in a pipeline
// of the stage's own, and forgets the reservation.
func TestKeylessSaleIsOneRoundTripOnTheBuyersPath(t *testing.T) {
	e, ra, svc, count := confirmEnv(t, 10)
	ctx := context.WithValue(context.Background(), buyerMark{}, true)
	if _, err := svc.Buy(ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: e.ID, UserID: "one", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	// The confirm leaves on its own, maybe before this line: wait for it,
	// then look at both lists at once.
	if err := ra.WaitConfirms(context.Background()); err != nil {
		t.Fatal(err)
	}
	trips, all := count.take()
	if fmt.Sprint(trips) != "[evalsha]" {
		t.Fatalf("the buyer waited for %v, want [evalsha] alone", trips)
	}
	if fmt.Sprint(all) != "[evalsha hdel]" {
		t.Errorf("Redis got %v for the sale, want the reservation, then the confirm: [evalsha hdel]", all)
	}
	if n, err := e.RDB.HLen(context.Background(), e.Key("pending")).Result(); err != nil || n != 0 {
		t.Errorf("%d reservations pending (%v), want the sale's confirmed", n, err)
	}
}

// TestConfirmsOfConcurrentSalesLeaveTogether: while a confirm is in flight
// (held by its pipeline), the confirms of the sales committed meanwhile
// queue, and leave in one pipeline after it: one HDEL for the item's
// reservations, whatever the number of sales.
func TestConfirmsOfConcurrentSalesLeaveTogether(t *testing.T) {
	e, ra, svc, _ := confirmEnv(t, 20)
	hold := &heldPipeline{entered: make(chan struct{}), release: make(chan struct{})}
	e.RDB.AddHook(hold)
	ctx := context.Background()
	if _, err := svc.Buy(ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: e.ID, UserID: "first", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.entered: // the first sale's confirm is in flight, and held
	case <-time.After(30 * time.Second):
		t.Fatal("the first sale was answered, and no confirm pipeline left after it")
	}
	const crowd = 8
	for i := range crowd {
		// Answered while the confirm is held: it is not on their path.
		if _, err := svc.Buy(ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: e.ID, UserID: fmt.Sprintf("c%d", i), Quantity: 1}); err != nil {
			t.Fatal(err)
		}
	}
	close(hold.release)
	if err := ra.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	if got := hold.sizes(); fmt.Sprint(got) != fmt.Sprintf("[[1] [%d]]", crowd) {
		t.Errorf("confirm pipelines (orders per HDEL) %v, want the first alone and then the %d together", got, crowd)
	}
	if n, err := e.RDB.HLen(ctx, e.Key("pending")).Result(); err != nil || n != 0 {
		t.Errorf("%d reservations pending (%v), want every sale confirmed", n, err)
	}
}

// heldPipeline holds the first pipeline until release, and records the
// number of orders of each HDEL of every pipeline.
type heldPipeline struct {
	entered, release chan struct{}
	mu               sync.Mutex
	held             bool
	pipes            [][]int
}

func (h *heldPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *heldPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *heldPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var sizes []int
		for _, c := range cmds {
			sizes = append(sizes, len(c.Args())-2) // HDEL key field...
		}
		h.mu.Lock()
		h.pipes = append(h.pipes, sizes)
		first := !h.held
		h.held = true
		h.mu.Unlock()
		if first {
			close(h.entered)
			<-h.release
		}
		return next(ctx, cmds)
	}
}

func (h *heldPipeline) sizes() [][]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pipes
}

// TestLostConfirmIsKeptByTheReconcile: the confirm's pipeline fails, so the
// sale's reservation stays in Redis. The buyer was told "bought", and
// truly: the reconcile job's repair finds the order and keeps the unit
// sold (it does not give it back), and the order stands.
func TestLostConfirmIsKeptByTheReconcile(t *testing.T) {
	e, ra, svc, count := confirmEnv(t, 10)
	ctx := context.Background()
	count.mu.Lock()
	count.failPipelines = true
	count.mu.Unlock()
	o, err := svc.Buy(ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: e.ID, UserID: "lost", Quantity: 1})
	if err != nil {
		t.Fatalf("the buyer whose confirm is lost: %v, want bought", err)
	}
	if err := ra.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	if _, all := count.take(); fmt.Sprint(all) != "[evalsha hdel]" {
		t.Fatalf("Redis was sent %v, want the script and the (dropped) confirm", all)
	}
	pending, err := e.RDB.HKeys(ctx, e.Key("pending")).Result()
	if err != nil || fmt.Sprint(pending) != fmt.Sprintf("[%s]", o.No) {
		t.Fatalf("reservations pending %v (%v), want the lost confirm's %s", pending, err, o.No)
	}
	d, err := ra.Repair(ctx, e.ID, 0, e.DB.Products().OrderExists)
	if err != nil || d.Resolved != 1 {
		t.Fatalf("repair: %+v, %v; want the reservation settled", d, err)
	}
	if s := e.RedisStock(t); s != 8 {
		t.Errorf("Redis copy holds %d after the repair, want 8: the unit kept sold", s)
	}
	if n, err := e.RDB.HLen(ctx, e.Key("pending")).Result(); err != nil || n != 0 {
		t.Errorf("%d reservations pending after the repair (%v), want none", n, err)
	}
	row, err := e.DB.Products().FindOrder(ctx, o.No)
	if err != nil || row.Status != inventory.StatusConfirmed || row.UserID != "lost" {
		t.Errorf("the lost confirm's order: %+v, %v; want it standing, confirmed", row, err)
	}
	a, err := svc.Audit(ctx, e.ID)
	if err != nil || a.Sold != 2 || a.Stock != 8 || !a.Conserved() {
		t.Errorf("audit %+v, %v; want 2 sold, 8 left, conserved", a, err)
	}
}
