package redisstage_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// The sweeper's marks (redis_sharded_sweep.go): an idle pass costs the same
// whatever the catalogue, an item sold through another instance is still
// swept, and a change that lands while a sweep is clearing its mark keeps
// its mark.

// commandCount is a go-redis hook that counts the commands a client sends.
type commandCount struct{ n atomic.Int64 }

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// countingStore counts the catalogue reads the stage makes.
type countingStore struct {
	*store.Ledger
	lists, gets atomic.Int64
}

func (c *countingStore) List(ctx context.Context) ([]inventory.Item, error) {
	c.lists.Add(1)
	return c.Ledger.List(ctx)
}

func (c *countingStore) Get(ctx context.Context, id int64) (inventory.Item, error) {
	c.gets.Add(1)
	return c.Ledger.Get(ctx, id)
}

// idleSweeper is a redis-sharded stage over a catalogue of n items (100
// units each), of which the first ten were reset to 3 units, swept once.
type idleSweeper struct {
	stage *redisstage.RedisSharded
	cmds  *commandCount
	store *countingStore
}

func newIdleSweeper(t testing.TB, n int) *idleSweeper {
	t.Helper()
	ctx := context.Background()
	db := testenv.SQLite(t)
	if _, err := db.Products().LoadCatalogue(ctx, n, 100); err != nil {
		t.Fatal(err)
	}
	rdb := testenv.Redis(t)
	w := &idleSweeper{cmds: &commandCount{}, store: &countingStore{Ledger: db.Products()}}
	rdb.AddHook(w.cmds)
	w.stage = redisstage.NewRedisSharded(rdb, w.store, testenv.Name("idle-"), shardedBuckets, nil)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: w.stage}, "a", "O")
	for id := int64(1); id <= 10; id++ {
		if err := svc.Reset(ctx, id, 3); err != nil { // [1 1 1 0]
			t.Fatal(err)
		}
	}
	if err := w.pass(); err != nil {
		t.Fatal(err)
	}
	if w.stage.Sweeps() != 10 || w.stage.UnitsMoved() != 20 {
		t.Fatalf("the first pass over %d items: %d sweeps moved %d units; want 10 moving 20", n, w.stage.Sweeps(), w.stage.UnitsMoved())
	}
	return w
}

// pass is one pass of the sweeper as `serve` runs it, gathering at most 5
// units.
func (w *idleSweeper) pass() error { return w.stage.SweepChanged(context.Background(), 5) }

// idle runs one pass with nothing changed, and returns the Redis commands
// and the catalogue reads it cost.
func (w *idleSweeper) idle(t testing.TB) (cmds, reads int64) {
	t.Helper()
	c0, l0, g0 := w.cmds.n.Load(), w.store.lists.Load(), w.store.gets.Load()
	if err := w.pass(); err != nil {
		t.Fatal(err)
	}
	return w.cmds.n.Load() - c0, w.store.lists.Load() - l0 + w.store.gets.Load() - g0
}

// TestShardedIdleSweepCostsTheSameWhateverTheCatalogue: with nothing
// bought since the last pass, a pass over a catalogue of 2,000 items sends
// no more Redis commands than over 10, and reads nothing from the
// database.
func TestShardedIdleSweepCostsTheSameWhateverTheCatalogue(t *testing.T) {
	small, large := newIdleSweeper(t, 10), newIdleSweeper(t, 2000)
	smallCmds, smallReads := small.idle(t)
	largeCmds, largeReads := large.idle(t)
	t.Logf("an idle pass: %d commands over 10 items, %d over 2000", smallCmds, largeCmds)
	if largeCmds != smallCmds || smallReads != 0 || largeReads != 0 {
		t.Fatalf("an idle pass: %d commands and %d catalogue reads over 2000 items, %d and %d over 10; want the same commands and no reads",
			largeCmds, largeReads, smallCmds, smallReads)
	}
	if small.stage.Sweeps() != 10 || large.stage.Sweeps() != 10 {
		t.Fatalf("idle passes swept: %d and %d sweeps; want still 10", small.stage.Sweeps(), large.stage.Sweeps())
	}
}

// BenchmarkShardedIdleSweep reports the Redis commands of one idle pass
// of the sweeper (one pass a second in `serve`, so commands per second)
// over a catalogue of 1,000 items.
//
//	go test -run '^$' -bench BenchmarkShardedIdleSweep ./internal/inventory/redisstage/
func BenchmarkShardedIdleSweep(b *testing.B) {
	w := newIdleSweeper(b, 1000)
	var cmds, reads int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, r := w.idle(b)
		cmds, reads = cmds+c, reads+r
	}
	b.ReportMetric(float64(cmds)/float64(b.N), "commands/pass")
	b.ReportMetric(float64(reads)/float64(b.N), "catalogue-reads/pass")
}

// fleet is two instances of redis-sharded, a and b, each with a client of
// its own, selling one product of one database.
type fleet struct {
	t          *testing.T
	db         *store.DB
	rdbA, rdbB redis.UniversalClient
	a, b       *redisstage.RedisSharded
	svcA, svcB *inventory.Service
}

const fleetItem = 1

func newFleet(t *testing.T, rdbA, rdbB redis.UniversalClient, ns string) *fleet {
	f := &fleet{t: t, db: testenv.SQLite(t), rdbA: rdbA, rdbB: rdbB}
	f.a = redisstage.NewRedisSharded(rdbA, f.db.Products(), ns, shardedBuckets, nil)
	f.b = redisstage.NewRedisSharded(rdbB, f.db.Products(), ns, shardedBuckets, nil)
	f.svcA = inventory.NewService(f.db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: f.a}, "a", "A")
	f.svcB = inventory.NewService(f.db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: f.b}, "b", "B")
	return f
}

// buyHomed sells n units through svc, one to each of n new users homed in
// bucket home.
func (f *fleet) buyHomed(svc *inventory.Service, prefix string, home, n int) {
	f.t.Helper()
	for i, found := 0, 0; found < n; i++ {
		u := fmt.Sprintf("%s%d", prefix, i)
		if f.a.Home(u) != home {
			continue
		}
		found++
		if _, err := svc.Buy(context.Background(), inventory.StageRedisSharded, inventory.Request{ItemID: fleetItem, UserID: u, Quantity: 1}); err != nil {
			f.t.Fatalf("%s: %v", u, err)
		}
	}
}

// stock reads the buckets and checks that they hold the database stock.
func (f *fleet) stock() string {
	f.t.Helper()
	ctx := context.Background()
	var got []int
	sum := 0
	for b := range shardedBuckets {
		n, err := f.rdbA.Get(ctx, f.a.BucketKeysForTest(fleetItem, b)[0]).Int()
		if err != nil {
			f.t.Fatalf("bucket %d: %v", b, err)
		}
		got, sum = append(got, n), sum+n
	}
	it, err := f.db.Products().Get(ctx, fleetItem)
	if err != nil || it.Stock != sum {
		f.t.Fatalf("buckets %v hold %d, the database %d (%v)", got, sum, it.Stock, err)
	}
	return fmt.Sprint(got)
}

// sweep runs one pass of s's sweeper, gathering at most 5 units.
func (f *fleet) sweep(s *redisstage.RedisSharded) {
	f.t.Helper()
	if err := s.SweepChanged(context.Background(), 5); err != nil {
		f.t.Fatal(err)
	}
}

// marked says whether the item is marked changed.
func (f *fleet) marked() bool {
	f.t.Helper()
	m, err := f.a.ChangedForTest(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	_, ok := m[fmt.Sprint(fleetItem)]
	return ok
}

// TestShardedSweeperGathersWhatAnotherInstanceSold: instance a's sweeper
// has swept the item, which then sells through b alone, down to 4 units
// in two buckets. a's next pass must gather them, and leave nothing for
// b's. On one Redis and on a Cluster, where the marks' slot is apart from
// every bucket's.
func TestShardedSweeperGathersWhatAnotherInstanceSold(t *testing.T) {
	t.Run("one Redis", func(t *testing.T) {
		a, b := twoInstances(t)
		sweepWhatAnotherSold(t, newFleet(t, a, b, testenv.Name("fl-")))
	})
	t.Run("Cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Redis Cluster")
		}
		addrs := testenv.StartRedisCluster(t)
		a := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
		b := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
		t.Cleanup(func() { _ = errors.Join(a.Close(), b.Close()) })
		ns, _ := spreadNamespace(t, context.Background(), a, fleetItem, shardedBuckets)
		sweepWhatAnotherSold(t, newFleet(t, a, b, ns))
	})
}

func sweepWhatAnotherSold(t *testing.T, f *fleet) {
	if err := f.svcA.Reset(context.Background(), fleetItem, 10); err != nil { // [3 3 2 2]
		t.Fatal(err)
	}
	f.sweep(f.a) // 10 units: nothing to gather
	if f.marked() || f.a.Sweeps() != 0 {
		t.Fatalf("after a's pass over 10 units: marked %v, %d sweeps", f.marked(), f.a.Sweeps())
	}
	f.buyHomed(f.svcB, "b-", 0, 6) // [0 0 2 2], sold through b
	if !f.marked() {
		t.Fatal("b's sales left no mark")
	}
	f.sweep(f.a)
	if got := f.stock(); got != "[0 0 4 0]" || f.a.Sweeps() != 1 || f.a.UnitsMoved() != 2 || f.marked() {
		t.Fatalf("after a's pass: buckets %s, a's %d sweeps moved %d units, marked %v; want [0 0 4 0], 1 and 2, no mark",
			got, f.a.Sweeps(), f.a.UnitsMoved(), f.marked())
	}
	f.sweep(f.b)
	if f.b.Sweeps() != 0 {
		t.Fatalf("b swept again what a had gathered: %d sweeps", f.b.Sweeps())
	}
}

// TestShardedSweeperGathersAnItemWhoseMarkFailed: b's mark of its sale
// fails (its Redis refuses that one command), so no other instance hears
// of it; b's own sweeper must still gather the units.
func TestShardedSweeperGathersAnItemWhoseMarkFailed(t *testing.T) {
	rdbA, rdbB := twoInstances(t)
	f := newFleet(t, rdbA, rdbB, testenv.Name("fm-"))
	if err := f.svcA.Reset(context.Background(), fleetItem, 10); err != nil {
		t.Fatal(err)
	}
	f.sweep(f.a)
	seq := f.b.ChangedKeysForTest()[1] // named by the marks alone
	var refused atomic.Int64
	rdbB.AddHook(beforeCommand(func(cmd redis.Cmder) error {
		if hasArgs(cmd, seq) {
			refused.Add(1)
			return errors.New("the test refused the mark")
		}
		return nil
	}))
	f.buyHomed(f.svcB, "b-", 0, 6) // [0 0 2 2]
	if refused.Load() == 0 || f.marked() {
		t.Fatalf("%d marks refused, marked %v: want the mark refused", refused.Load(), f.marked())
	}
	f.sweep(f.a)
	if f.a.Sweeps() != 0 {
		t.Fatalf("a swept an item it was never told of: %d sweeps", f.a.Sweeps())
	}
	f.sweep(f.b)
	if got := f.stock(); got != "[0 0 4 0]" || f.b.Sweeps() != 1 {
		t.Fatalf("after b's pass: buckets %s, %d sweeps; want [0 0 4 0] and 1", got, f.b.Sweeps())
	}
	f.sweep(f.b)
	if f.b.Sweeps() != 1 {
		t.Fatalf("b swept its remembered item twice: %d sweeps", f.b.Sweeps())
	}
}

// beforeCommand is a go-redis hook that calls f before each command; an
// error from f is the command's answer, and the command is not sent.
type beforeCommand func(cmd redis.Cmder) error

func (f beforeCommand) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f beforeCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f beforeCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := f(cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestShardedMarkWrittenDuringASweepOutlivesItsClear holds a's sweeper
// after it swept the item and before it clears the mark it read, and then
// changes the item: a reset spreads 4 units over the four buckets, and
// marks it. a's clear must leave that mark, so a's next pass gathers the
// units. In the second case another sweeper (b) reads the same mark and
// clears it before the reset: the reset's mark is written where b's clear
// left none, and a's late clear must not take it for the one it read.
func TestShardedMarkWrittenDuringASweepOutlivesItsClear(t *testing.T) {
	for _, otherClears := range []bool{false, true} {
		t.Run(fmt.Sprintf("another sweeper cleared first %v", otherClears), func(t *testing.T) {
			rdbA, rdbB := twoInstances(t)
			f := newFleet(t, rdbA, rdbB, testenv.Name("fc-"))
			if err := f.svcA.Reset(context.Background(), fleetItem, 10); err != nil {
				t.Fatal(err)
			}
			keys := f.a.ChangedKeysForTest()
			var held atomic.Bool
			rdbA.AddHook(beforeCommand(func(cmd redis.Cmder) error {
				// a's clear is the script that names the marks alone (a mark
				// names the sequence too).
				script := cmd.Name() == "evalsha" || cmd.Name() == "eval"
				if !script || !hasArgs(cmd, keys[0]) || hasArgs(cmd, keys[1]) || !held.CompareAndSwap(false, true) {
					return nil
				}
				if otherClears {
					f.sweep(f.b)
					if f.marked() {
						t.Error("b's pass left the mark it read")
					}
				}
				if err := f.svcB.Reset(context.Background(), fleetItem, 4); err != nil { // [1 1 1 1]
					t.Error(err)
				}
				return nil
			}))
			f.sweep(f.a)
			if !held.Load() || !f.marked() {
				t.Fatalf("held %v, marked %v: the reset's mark is gone with a's clear", held.Load(), f.marked())
			}
			f.sweep(f.a)
			if got := f.stock(); got != "[4 0 0 0]" || f.a.UnitsMoved() != 3 || f.marked() {
				t.Fatalf("after a's next pass: buckets %s, %d units moved, marked %v; want [4 0 0 0], 3, no mark", got, f.a.UnitsMoved(), f.marked())
			}
		})
	}
}

// TestShardedRestockedItemIsSwept: the item's 3 units are gathered in one
// bucket and its mark cleared; then every bucket is lost (a Redis that
// lost its data) and the reconcile job's repair loads them again, spread
// over three buckets. The repair must mark the item, so the next pass
// gathers them again.
func TestShardedRestockedItemIsSwept(t *testing.T) {
	a, b := twoInstances(t)
	f := newFleet(t, a, b, testenv.Name("fr-"))
	ctx := context.Background()
	if err := f.svcA.Reset(ctx, fleetItem, 3); err != nil { // [1 1 1 0]
		t.Fatal(err)
	}
	f.sweep(f.a)
	if got := f.stock(); got != "[3 0 0 0]" || f.marked() {
		t.Fatalf("after the first pass: buckets %s, marked %v", got, f.marked())
	}
	for b := range shardedBuckets {
		if err := f.rdbA.Del(ctx, f.a.BucketKeysForTest(fleetItem, b)[0]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	d, err := f.b.Repair(ctx, fleetItem, time.Hour, f.db.Products().OrderExists)
	if err != nil || !d.Repaired {
		t.Fatalf("repair of lost buckets: %+v, %v", d, err)
	}
	if got := f.stock(); got != "[1 1 1 0]" || !f.marked() {
		t.Fatalf("after the repair: buckets %s, marked %v; want [1 1 1 0] marked", got, f.marked())
	}
	f.sweep(f.a)
	if got := f.stock(); got != "[3 0 0 0]" || f.a.Sweeps() != 2 || f.marked() {
		t.Fatalf("after the next pass: buckets %s, %d sweeps, marked %v; want [3 0 0 0], 2, no mark", got, f.a.Sweeps(), f.marked())
	}
}

// twoInstances returns two clients of the one test Redis, as two instances
// of a fleet have: where SECKILL_TEST_REDIS_ADDR is not set, each
// testenv.Redis call starts an embedded server of its own.
func twoInstances(t *testing.T) (a, b *redis.Client) {
	a = testenv.Redis(t)
	b = redis.NewClient(a.Options())
	t.Cleanup(func() { _ = b.Close() })
	return a, b
}
