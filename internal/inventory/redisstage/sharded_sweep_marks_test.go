package redisstage_test

import (
	"context"
	"sync/atomic"
	"testing"

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
