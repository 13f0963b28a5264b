package redisstage_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// Attacks on redis-sharded's sweeper (redis_sharded_sweep.go): a move cut
// between its halves, a move finished twice at once, a move that carries a
// unit behind a buyer's walk, and a crowd racing a paused sweeper and a
// running one, on one Redis and on a Cluster.

var errCut = errors.New("the test cut the move here")

// conserved checks that the buckets and the moves in flight hold exactly
// the database stock, and returns the buckets.
func (e *shardedEnv) conserved() []int {
	e.t.Helper()
	stock, inFlight := e.buckets()
	_, moving, err := e.stage.MovesInFlightForTest(context.Background(), e.id)
	if err != nil {
		e.t.Fatal(err)
	}
	it, err := e.db.Products().Get(context.Background(), e.id)
	if err != nil {
		e.t.Fatal(err)
	}
	sum := 0
	for _, n := range stock {
		sum += n
	}
	if sum+moving+inFlight != it.Stock {
		e.t.Fatalf("buckets %v (sum %d) + %d units moving + %d reserved != database stock %d", stock, sum, moving, inFlight, it.Stock)
	}
	return stock
}

// TestShardedSweepGathersTheLastUnits: a sweep leaves a stock above its
// threshold alone and gathers one at or below it into the fullest bucket,
// counting the sweep and the units; every unit still sells.
func TestShardedSweepGathersTheLastUnits(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), 10)
	ctx := context.Background()
	if n, err := e.stage.Sweep(ctx, e.id, 5); err != nil || n != 0 {
		t.Fatalf("sweep of 10 units below 5: moved %d, %v", n, err)
	}
	for _, u := range e.users("g-", 0, 6) { // buckets 0 and 1 empty
		if err := e.buy(u); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.stage.Sweep(ctx, e.id, 5); err != nil || n != 2 {
		t.Fatalf("sweep of [0 0 2 2]: moved %d, %v; want 2", n, err)
	}
	if got := e.conserved(); fmt.Sprint(got) != "[0 0 4 0]" || e.stage.Sweeps() != 1 || e.stage.UnitsMoved() != 2 {
		t.Fatalf("after the sweep: buckets %v, %d sweeps, %d units moved", got, e.stage.Sweeps(), e.stage.UnitsMoved())
	}
	for _, u := range e.users("h-", 1, 4) {
		if err := e.buy(u); err != nil {
			t.Fatalf("%s with units in bucket 2: %v", u, err)
		}
	}
	if err := e.buy("late"); !errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrMayReturn) {
		t.Fatalf("after the sale: %v; want sold out for good", err)
	}
	e.audit(10)
}

// TestShardedMoveCutBetweenItsHalves cuts a move after its units left the
// source bucket and before they reached the destination, as a crash
// would. At that instant the buckets and the journal still hold the
// stock. The reconcile job must finish the move, not add the missing unit
// (which the move would then add again); a buyer who finds every bucket
// empty while a cut move holds a unit must finish it and buy, not hear
// sold out.
func TestShardedMoveCutBetweenItsHalves(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), shardedBuckets) // [1 1 1 1]
	ctx := context.Background()
	e.stage.SetAfterMoveTakeForTest(func(int64) error { return errCut })
	if _, err := e.stage.Sweep(ctx, e.id, 10); !errors.Is(err, errCut) {
		t.Fatalf("the cut sweep: %v", err)
	}
	if got := e.conserved(); fmt.Sprint(got) != "[1 0 1 1]" {
		t.Fatalf("after the cut: buckets %v, want [1 0 1 1] and one unit in the journal", got)
	}
	e.stage.SetAfterMoveTakeForTest(nil)
	d, err := e.stage.Repair(ctx, e.id, time.Hour, e.db.Products().OrderExists)
	if err != nil || d.Repaired || d.RedisStock != shardedBuckets {
		t.Fatalf("repair of a cut move: %+v, %v; want the move finished, nothing corrected", d, err)
	}
	if got := e.conserved(); fmt.Sprint(got) != "[2 0 1 1]" {
		t.Fatalf("after the repair: buckets %v, want [2 0 1 1]", got)
	}

	// Cut another, then sell every unit: the last buyer finds the buckets
	// empty and the unit in the journal.
	e.stage.SetAfterMoveTakeForTest(func(int64) error { return errCut })
	if _, err := e.stage.Sweep(ctx, e.id, 10); !errors.Is(err, errCut) {
		t.Fatalf("the second cut sweep: %v", err)
	}
	e.stage.SetAfterMoveTakeForTest(nil)
	if got := e.conserved(); fmt.Sprint(got) != "[2 0 0 1]" {
		t.Fatalf("after the second cut: buckets %v", got)
	}
	for i, u := range e.users("cut-", 3, shardedBuckets) {
		if err := e.buy(u); err != nil {
			t.Fatalf("buyer %d of %d with a unit in a cut move: %v", i+1, shardedBuckets, err)
		}
	}
	if err := e.buy("late"); !errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrMayReturn) {
		t.Fatalf("after the sale: %v; want sold out for good", err)
	}
	e.audit(shardedBuckets)
	if moves, _, err := e.stage.MovesInFlightForTest(ctx, e.id); err != nil || moves != 0 {
		t.Fatalf("moves left in the journal: %d, %v", moves, err)
	}
}

// TestShardedMoveFinishedTwiceAtOnce: between the halves of a sweep's move,
// the reconcile job finishes the same move (both halves and the journal).
// The sweep then runs its second half: each half must count once, so the
// buckets still hold the stock, not one unit more.
func TestShardedMoveFinishedTwiceAtOnce(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), shardedBuckets)
	ctx := context.Background()
	var fired atomic.Bool
	e.stage.SetAfterMoveTakeForTest(func(int64) error {
		if !fired.CompareAndSwap(false, true) {
			return nil // the repair's own run of the move
		}
		_, err := e.stage.Repair(ctx, e.id, time.Hour, e.db.Products().OrderExists)
		return err
	})
	if n, err := e.stage.Sweep(ctx, e.id, 10); err != nil || n != 3 {
		t.Fatalf("sweep: moved %d, %v; want 3", n, err)
	}
	if got := e.conserved(); fmt.Sprint(got) != "[4 0 0 0]" {
		t.Fatalf("after the sweep: buckets %v, want [4 0 0 0]", got)
	}
}

// TestShardedRefusalWaitsForAMoveBehindTheWalk forces the interleaving a
// move makes possible: a buyer homed in bucket 2 finds bucket 3 empty; a
// move (from a sweeper whose look is older) then carries the last unit
// from bucket 0, not yet visited, into bucket 3; the buyer finds buckets 0
// and 1 empty. Its walk saw no unit, yet bucket 3 holds one: it must walk
// again and buy it.
func TestShardedRefusalWaitsForAMoveBehindTheWalk(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), 1) // [1 0 0 0]
	ctx := context.Background()
	x := e.users("walker-", 2, 1)[0]
	bucket3 := e.stage.BucketKeysForTest(e.id, 3)[0]
	var fired atomic.Bool
	e.rdb.AddHook(afterCommand(func(cmd redis.Cmder) {
		if cmd.Err() == nil && hasArgs(cmd, bucket3, x) && fired.CompareAndSwap(false, true) {
			if n, err := e.stage.MoveForTest(ctx, e.id, 0, 3, 1); err != nil || n != 1 {
				t.Errorf("the move behind the walk: %d, %v", n, err)
			}
		}
	}))
	if err := e.buy(x); err != nil {
		t.Fatalf("the buyer whose walk a move passed: %v", err)
	}
	if !fired.Load() {
		t.Fatal("the move never ran")
	}
	e.audit(1)
}

// afterCommand is a go-redis hook that calls f after each command.
type afterCommand func(cmd redis.Cmder)

func (f afterCommand) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f afterCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f afterCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		f(cmd)
		return err
	}
}

// hasArgs says whether cmd's arguments include every one of want.
func hasArgs(cmd redis.Cmder, want ...string) bool {
	var args []string
	for _, a := range cmd.Args() {
		args = append(args, fmt.Sprint(a))
	}
	for _, w := range want {
		if !slices.Contains(args, w) {
			return false
		}
	}
	return true
}

// TestShardedCrowdRacesTheSweeper: one buyer per unit, released at once
// on a single Redis, while a sweeper is paused in the middle of a move
// that carries a quarter of the stock, and another sweeps without pause.
// Every buyer must buy (a wrong sold out leaves a unit unsold), then the
// paused sweeper finishes and must add nothing; no unit is left anywhere.
func TestShardedCrowdRacesTheSweeper(t *testing.T) {
	raceTheSweeper(t, testenv.Redis(t), testenv.SQLite(t), testenv.Name("sw-"))
}

// TestShardedCrowdRacesTheSweeperOnACluster is the same race on a real
// three-master Cluster, with the buckets on every master.
func TestShardedCrowdRacesTheSweeperOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.StartRedisCluster(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ns, _ := spreadNamespace(t, context.Background(), rdb, 1, shardedBuckets)
	raceTheSweeper(t, rdb, testenv.SQLite(t), ns)
}

func raceTheSweeper(t *testing.T, rdb redis.UniversalClient, db *store.DB, ns string) {
	const stock = 40
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := int64(1)
	stage := func() *redisstage.RedisSharded {
		return redisstage.NewRedisSharded(rdb, db.Products(), ns, shardedBuckets, nil)
	}
	services := make([]*inventory.Service, 3)
	for i := range services {
		services[i] = inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: stage()}, fmt.Sprintf("i%d", i), "O")
	}
	if err := services[0].Reset(ctx, id, stock); err != nil {
		t.Fatal(err)
	}
	paused, free := stage(), stage()
	taken, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	paused.SetAfterMoveTakeForTest(func(int64) error {
		once.Do(func() { close(taken); <-resume })
		return nil
	})
	pausedDone := make(chan error, 1)
	go func() { _, err := paused.Sweep(ctx, id, stock); pausedDone <- err }()
	<-taken // a quarter of the stock is now in no bucket
	buyersDone := make(chan struct{})
	sweeperDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-buyersDone:
				sweeperDone <- nil
				return
			default:
			}
			if _, err := free.Sweep(ctx, id, stock); err != nil {
				sweeperDone <- err
				return
			}
		}
	}()
	ok, soldOut := releaseAtOnce(t, stock, func(b int) error {
		_, err := services[b%3].Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: id, UserID: fmt.Sprintf("s%d", b), Quantity: 1})
		return err
	})
	close(buyersDone)
	close(resume)
	if err := errors.Join(<-sweeperDone, <-pausedDone); err != nil {
		t.Fatalf("sweepers: %v", err)
	}
	_, err := services[0].Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: id, UserID: "late", Quantity: 1})
	if !errors.Is(err, inventory.ErrSoldOut) {
		t.Errorf("a buyer after the sale: %v; want sold out", err)
	}
	a, err := db.Products().Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ok=%d sold-out=%d audit=%+v; the free sweeper moved %d units in %d sweeps", ok, soldOut, a, free.UnitsMoved(), free.Sweeps())
	if ok != stock || a.Sold != stock || a.Stock != 0 || a.Oversold() != 0 || !a.Conserved() {
		t.Fatalf("%d of %d buyers bought (%d heard sold out), audit %+v: want every one", ok, stock, soldOut, a)
	}
	for b := range shardedBuckets {
		k := paused.BucketKeysForTest(id, b)
		if n, err := rdb.Get(ctx, k[0]).Int(); err != nil || n != 0 || rdb.HLen(ctx, k[1]).Val() != 0 {
			t.Errorf("bucket %d after the sale: stock %d (%v), %d in flight", b, n, err, rdb.HLen(ctx, k[1]).Val())
		}
	}
	if moves, units, err := paused.MovesInFlightForTest(ctx, id); err != nil || moves != 0 {
		t.Errorf("moves left in the journal: %d holding %d units, %v", moves, units, err)
	}
}

// BenchmarkShardedRefusal measures what the sweeper costs a buyer refused
// after the sale: on an item never swept the refusal believes its walk; on
// one the sweeper has moved units in, it walks again. Compare the two
// sub-benchmarks of one run (one Redis round trip each way per bucket).
//
//	go test -run '^$' -bench BenchmarkShardedRefusal ./internal/inventory/redisstage/
func BenchmarkShardedRefusal(b *testing.B) {
	ctx := context.Background()
	rdb := testenv.Redis(b)
	db := testenv.SQLite(b)
	stage := redisstage.NewRedisSharded(rdb, db.Products(), testenv.Name("bench-"), shardedBuckets, nil)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: stage}, "a", "O")
	if err := svc.Reset(ctx, 1, 0); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"never-swept", "swept"} {
		if name == "swept" {
			if _, err := stage.MoveForTest(ctx, 1, 0, 1, 1); err != nil { // a move of nothing still counts as begun
				b.Fatal(err)
			}
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_, err := svc.Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: 1, UserID: fmt.Sprintf("%s-%d", name, i), Quantity: 1})
				if !errors.Is(err, inventory.ErrSoldOut) {
					b.Fatalf("buy %d after the sale: %v", i, err)
				}
			}
		})
	}
}
