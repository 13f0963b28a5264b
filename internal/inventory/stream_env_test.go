package inventory_test

// The redis-stream rig the lifecycle, contract and window tests share with
// the stage's own (redisstage/stream_env_test.go keeps the same rig).

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

// startWriter runs an order writer of q until the test ends, or until the
// returned stop is called, which returns what Run returned.
func startWriter(t *testing.T, ctx context.Context, q *redisstage.RedisStream, st *store.Ledger, opts orderwriter.Options) (stop func() error) {
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

// waitDrained polls until no order of the item is queued any more, or
// fails the test when ctx ends first.
func waitDrained(t *testing.T, ctx context.Context, q *redisstage.RedisStream, id int64) {
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

// streamEnv is one item on both backends' worth of redis-stream: a
// database, a Redis namespace, and a way to build an instance.
type streamEnv struct {
	db   *store.DB
	rdb  *redis.Client
	ns   string
	id   int64
	opts redisstage.StreamOptions // the stage's options in instance
}

func newStreamEnv(t *testing.T, db *store.DB, stock int) *streamEnv {
	t.Helper()
	e := &streamEnv{db: db, rdb: testenv.Redis(t), ns: testenv.Name("s-"), id: 1}
	if err := db.Products().Reset(context.Background(), e.id, stock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		keys, _ := e.rdb.Keys(context.Background(), "seckill:{"+e.ns+":*").Result()
		if len(keys) > 0 {
			_ = e.rdb.Del(context.Background(), keys...).Err()
		}
	})
	return e
}

// instance is one instance's stages and service over the env.
type instance struct {
	redisStock *redisstage.RedisAtomic
	stream     *redisstage.RedisStream
	service    *inventory.Service
}

func (e *streamEnv) instance(name string, life inventory.Lifecycle) instance {
	ra := redisstage.NewRedisAtomic(e.rdb, e.db.Products(), e.ns, nil)
	rs := redisstage.NewRedisStream(ra, e.opts)
	life.RedisStock, life.Queue = ra, rs
	stages := map[string]inventory.Stage{
		inventory.StageRedisAtomic: ra,
		inventory.StageRedisStream: rs,
		inventory.StageDBAtomic:    inventory.NewDBAtomic(e.db.Products()),
	}
	svc := inventory.NewService(e.db.Products(), stages, name, "O").WithLifecycle(life)
	return instance{redisStock: ra, stream: rs, service: svc}
}

func (e *streamEnv) redisStock(t *testing.T) int {
	t.Helper()
	n, err := e.rdb.Get(context.Background(), fmt.Sprintf("seckill:{%s:%d}:stock", e.ns, e.id)).Int()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *streamEnv) key(name string) string {
	return fmt.Sprintf("seckill:{%s:%d}:%s", e.ns, e.id, name)
}

// onEveryBackend runs test once on each SQL backend, with a minute's
// context and a fresh env whose product has stock.
func onEveryBackend(t *testing.T, stock int, test func(t *testing.T, ctx context.Context, e *streamEnv)) {
	t.Helper()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			test(t, ctx, newStreamEnv(t, b.Open(t), stock))
		})
	}
}

// buyN buys one unit for each of n new users under stage and returns the
// orders.
func buyN(t *testing.T, svc *inventory.Service, stage string, prefix string, n int) []inventory.Order {
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
