// Package streamtest is the redis-stream rig that the tests of package
// inventory (the lifecycle, the contract, the window) and of package
// redisstage share: one item on a SQL backend, a Redis namespace, and the
// instances built over them. It is for tests only.
package streamtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// StartWriter runs an order writer of q into st (a *store.Ledger, or a
// test's wrapper of one) until the test ends, or until the returned stop
// is called, which returns what Run returned.
func StartWriter(t *testing.T, ctx context.Context, q *redisstage.RedisStream, st orderwriter.Store, opts orderwriter.Options) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w := orderwriter.New(q, st, opts)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// WaitDrained polls until no order of the item is queued any more, or
// fails the test when ctx ends first.
func WaitDrained(t *testing.T, ctx context.Context, q *redisstage.RedisStream, id int64) {
	t.Helper()
	for {
		n, _, err := q.Backlog(ctx, id)
		if err != nil {
			t.Fatalf("backlog: %v", err)
		}
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d orders of item %d still queued when the test gave up waiting", n, id)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Env is one item on both backends' worth of redis-stream: a
// database, a Redis namespace, and a way to build an Instance.
type Env struct {
	DB   *store.DB
	RDB  *redis.Client
	NS   string                   // the item kind the rig's Redis keys are named by
	ID   int64                    // the rig's item
	Opts redisstage.StreamOptions // the stage's options in Instance
}

// NewEnv returns the rig over db, its item (id 1) restocked with stock
// units, its Redis keys in a namespace of their own, removed when the
// test ends.
func NewEnv(t *testing.T, db *store.DB, stock int) *Env {
	t.Helper()
	e := &Env{DB: db, RDB: testenv.Redis(t), NS: testenv.Name("s-"), ID: 1}
	if err := db.Products().Reset(context.Background(), e.ID, stock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		keys, _ := e.RDB.Keys(context.Background(), "seckill:{"+e.NS+":*").Result()
		keys = append(keys, "seckill:copies:redis-atomic:"+e.NS, "seckill:copies:redis-sharded:"+e.NS)
		if len(keys) > 0 {
			_ = e.RDB.Del(context.Background(), keys...).Err()
		}
	})
	return e
}

// Instance is one instance's stages and service over the env.
type Instance struct {
	RedisStock *redisstage.RedisAtomic
	Stream     *redisstage.RedisStream
	Service    *inventory.Service
}

// Instance builds one instance's redis-atomic, redis-stream and
// db-atomic stages and their service, with life's lifecycle (its Redis
// copy and queue filled in).
func (e *Env) Instance(name string, life inventory.Lifecycle) Instance {
	ra := redisstage.NewRedisAtomic(e.RDB, e.DB.Products(), e.NS, nil)
	rs := redisstage.NewRedisStream(ra, e.Opts)
	life.RedisStock, life.Queue = ra, rs
	stages := map[string]inventory.Stage{
		inventory.StageRedisAtomic: ra,
		inventory.StageRedisStream: rs,
		inventory.StageDBAtomic:    inventory.NewDBAtomic(e.DB.Products()),
	}
	svc := inventory.NewService(e.DB.Products(), stages, name, "O").WithLifecycle(life)
	return Instance{RedisStock: ra, Stream: rs, Service: svc}
}

// RedisStock reads the Redis copy's stock of the rig's item.
func (e *Env) RedisStock(t *testing.T) int {
	t.Helper()
	n, err := e.RDB.Get(context.Background(), fmt.Sprintf("seckill:{%s:%d}:stock", e.NS, e.ID)).Int()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Key names one of the rig's item's Redis keys.
func (e *Env) Key(name string) string {
	return fmt.Sprintf("seckill:{%s:%d}:%s", e.NS, e.ID, name)
}

// OnEveryBackend runs test once on each SQL backend, with a minute's
// context and a fresh env whose product has stock.
func OnEveryBackend(t *testing.T, stock int, test func(t *testing.T, ctx context.Context, e *Env)) {
	t.Helper()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			test(t, ctx, NewEnv(t, b.Open(t), stock))
		})
	}
}

// BuyN buys one unit for each of n new users under stage and returns the
// orders.
func BuyN(t *testing.T, svc *inventory.Service, stage string, prefix string, n int) []inventory.Order {
	t.Helper()
	var out []inventory.Order
	for i := 0; i < n; i++ {
		o, err := svc.Buy(context.Background(), stage, inventory.Request{ItemID: 1, UserID: fmt.Sprintf("%s%d", prefix, i), Quantity: 1})
		if err != nil {
			t.Fatalf("buy %d under %s: %v", i, stage, err)
		}
		out = append(out, o)
	}
	return out
}
