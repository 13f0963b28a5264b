package orderwriter_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// catalogue is the store with a catalogue of n items: a writer that lists
// the items sees them all, though only item 1 exists.
type catalogue struct {
	*store.Ledger
	n int
}

func (c catalogue) List(context.Context) ([]inventory.Item, error) {
	items := make([]inventory.Item, c.n)
	for i := range items {
		items[i] = inventory.Item{ID: int64(i + 1)}
	}
	return items, nil
}

// counter counts the commands a client sends, pipelined ones each.
type counter struct {
	mu    sync.Mutex
	names map[string]int
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *counter) add(cmd redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names[cmd.Name()]++
}

func (c *counter) total() (n int, names map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.names {
		n += k
	}
	return n, c.names
}

// TestIdleWriterCostDoesNotGrowWithTheCatalogue: a writer with nothing to
// write, over a catalogue of 10 items and of 2,000, on a Redis server of
// its own. One order is queued and written first, so the writer has met
// an item with work; then, over an idle second, it may send at most two
// commands per Poll (its look at the items with work) plus a few: the
// same bound for both catalogues. The old writer polled every item's
// stream every Poll and reported every item's backlog every 250ms.
func TestIdleWriterCostDoesNotGrowWithTheCatalogue(t *testing.T) {
	const poll, idle = 50 * time.Millisecond, time.Second
	bound := 2*int(idle/poll+1) + 10
	for _, items := range []int{10, 2000} {
		t.Run(strconvItoa(items), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e := streamtest.NewEnv(t, testenv.SQLite(t), 5)
			e.RDB = testenv.StartRedis(t).Client()
			in := e.Instance("a", inventory.Lifecycle{})
			c := &counter{names: map[string]int{}}
			e.RDB.AddHook(c)
			backlog := orderwriter.Hooks{Backlog: func(int64, int, int) {}}
			w := orderwriter.New(in.Stream, catalogue{e.DB.Products(), items}, orderwriter.Options{Poll: poll, Hooks: backlog})
			done := make(chan error, 1)
			wctx, stop := context.WithCancel(ctx)
			go func() { done <- w.Run(wctx) }()
			streamtest.BuyN(t, in.Service, inventory.StageRedisStream, "u", 1)
			streamtest.WaitDrained(t, ctx, in.Stream, e.ID)

			before, _ := c.total()
			time.Sleep(idle) // the idle period whose commands are counted
			after, names := c.total()
			stop()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("%d items: %d commands in the idle %s; by name since start: %v", items, after-before, idle, names)
			if n := after - before; n > bound {
				t.Errorf("an idle writer over %d items sent %d commands in %s (at most %d allowed, 2 per Poll of %s and 10); by name since start: %v", items, n, idle, bound, poll, names)
			}
		})
	}
}

func strconvItoa(n int) string { return strconv.Itoa(n) + "-items" }
