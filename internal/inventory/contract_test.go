package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// stageCase builds one stage per instance. Safe stages must never oversell;
// unsafe ones are run with a barrier between read and write that forces
// several buyers to act on the same read, and must be seen to oversell.
type stageCase struct {
	stage  string
	safe   func(instances int) bool
	build  func(env *raceEnv, st inventory.Store, opts inventory.SectionOptions) inventory.Stage
	forced func(instances int) int // barrier size for unsafe runs
}

var stageCases = []stageCase{
	{
		stage: "unlocked",
		safe:  func(int) bool { return false },
		build: func(_ *raceEnv, st inventory.Store, o inventory.SectionOptions) inventory.Stage {
			return inventory.NewUnlocked(st, "product", o)
		},
		forced: func(int) int { return 10 },
	},
	{
		stage: "local-mutex",
		safe:  func(instances int) bool { return instances == 1 },
		build: func(_ *raceEnv, st inventory.Store, o inventory.SectionOptions) inventory.Stage {
			return inventory.NewLocalMutex(st, "product", o)
		},
		// One buyer per instance is inside its own mutex at a time, so the
		// barrier holds one reader from each instance.
		forced: func(instances int) int { return instances },
	},
	{
		stage: "db-atomic",
		safe:  func(int) bool { return true },
		build: func(_ *raceEnv, st inventory.Store, _ inventory.SectionOptions) inventory.Stage {
			return inventory.NewDBAtomic(st)
		},
	},
	{
		stage: "redis-lock",
		safe:  func(int) bool { return true },
		build: func(env *raceEnv, st inventory.Store, o inventory.SectionOptions) inventory.Stage {
			env.connect()
			o.Fencing = true
			return inventory.NewRedisLock(env.locker, st, "product", o, env.lockOpts)
		},
	},
	{
		// redis-lock with SECKILL_LOCK_FAIR: every buyer joins the lock's
		// line in Redis, with no turns per instance in front of it.
		stage: "redis-lock-fair",
		safe:  func(int) bool { return true },
		build: func(env *raceEnv, st inventory.Store, o inventory.SectionOptions) inventory.Stage {
			env.connect()
			o.Fencing = true
			lo := env.lockOpts
			lo.Fair = true
			return inventory.NewRedisLock(env.locker, st, "product", o, lo)
		},
	},
	{
		stage: "redlock",
		safe:  func(int) bool { return true },
		build: func(env *raceEnv, st inventory.Store, o inventory.SectionOptions) inventory.Stage {
			env.connect()
			o.Fencing = true
			return inventory.NewRedLock(env.quorum, st, "product", o, env.lockOpts)
		},
	},
	{
		stage: "redis-atomic",
		safe:  func(int) bool { return true },
		build: func(env *raceEnv, st inventory.Store, _ inventory.SectionOptions) inventory.Stage {
			env.connect()
			return redisstage.NewRedisAtomic(env.rdb, st, env.ns, nil)
		},
	},
	{
		// Every instance runs its own order writer while the buyers race
		// (see runRace); the audit is read once the queue has drained.
		stage: "redis-stream",
		safe:  func(int) bool { return true },
		build: func(env *raceEnv, st inventory.Store, _ inventory.SectionOptions) inventory.Stage {
			env.connect()
			return redisstage.NewRedisStream(redisstage.NewRedisAtomic(env.rdb, st, env.ns, nil), redisstage.StreamOptions{})
		},
	},
	{
		// Four buckets of 12 or 13 units, loaded on first use by every
		// instance at once: the split must still add up to the stock.
		stage: "redis-sharded",
		safe:  func(int) bool { return true },
		build: func(env *raceEnv, st inventory.Store, _ inventory.SectionOptions) inventory.Stage {
			env.connect()
			return redisstage.NewRedisSharded(env.rdb, st, env.ns, 4, nil)
		},
	},
}

// raceEnv holds the Redis side of one run: a lock client, a RedLock over
// three logical databases, and a key namespace of its own. It connects only
// when a Redis stage asks (connect), so the stages that need no Redis
// (unlocked, local-mutex, db-atomic) run wherever their database does, and
// a missing Redis skips the Redis stages alone.
type raceEnv struct {
	t        *testing.T
	rdb      *redis.Client
	locker   *lock.Client
	quorum   *lock.RedLock
	lockOpts inventory.LockOptions
	ns       string
}

func newRaceEnv(t *testing.T) *raceEnv {
	return &raceEnv{
		t:        t,
		lockOpts: inventory.LockOptions{TTL: 5 * time.Second, Wait: 30 * time.Second},
		ns:       testenv.Name("product-"),
	}
}

// connect opens the Redis clients on first use; it skips the run's test
// when there is no Redis (fails under CI=true).
func (env *raceEnv) connect() {
	t := env.t
	t.Helper()
	if env.rdb != nil {
		return
	}
	addr := testenv.RedisAddr(t)
	prefix := testenv.Name("t") + ":"
	env.rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	env.locker = testenv.NewLock(t, env.rdb, lock.Options{Prefix: prefix})
	var nodes []redis.UniversalClient
	for db := 1; db <= 3; db++ {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, DB: db, MaxRetries: -1}))
	}
	// The same per-instance timeout as the service (TTL/20): the default
	// 50 ms is short for a busy CI machine.
	env.quorum = testenv.NewRedLock(t, nodes, lock.RedLockOptions{Options: lock.Options{Prefix: prefix}, InstanceTimeout: env.lockOpts.TTL / 20})
	t.Cleanup(func() {
		for _, c := range []interface{ Close() error }{env.locker, env.quorum, env.rdb} {
			if err := c.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
		for _, c := range nodes {
			if err := c.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
}

const (
	raceStock  = 50
	raceBuyers = 200
)

// TestContractNoOversell releases 200 buyers at once through a barrier on a
// stock of 50, for every stage, on both SQL backends, with one and three
// instances. Each instance has its own stage (and so its own local mutexes)
// over the shared database, as separate processes would.
func TestContractNoOversell(t *testing.T) {
	for _, backend := range testenv.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			db := backend.Open(t)
			var nextID atomic.Int64
			nextID.Store(1000)
			for _, instances := range []int{1, 3} {
				for _, sc := range stageCases {
					t.Run(fmt.Sprintf("%s/%d-instances", sc.stage, instances), func(t *testing.T) {
						id := nextID.Add(1)
						runRace(t, db, newRaceEnv(t), id, sc, instances)
					})
				}
			}
		})
	}
}

func runRace(t *testing.T, db *store.DB, env *raceEnv, id int64, sc stageCase, instances int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := db.Exec(ctx, "INSERT INTO products (id, name, initial_stock, stock) VALUES (?, ?, ?, ?)", id, "race-"+sc.stage, raceStock, raceStock); err != nil {
		t.Fatal(err)
	}
	safe := sc.safe(instances)
	opts := inventory.SectionOptions{}
	if safe {
		// Widen the window between read and write: any interleaving must
		// still be safe.
		opts.Delay = 200 * time.Microsecond
	} else {
		b := testkit.NewBarrier(sc.forced(instances), 2*time.Second)
		opts.BetweenReadAndWrite = func(ctx context.Context, _ inventory.Order) { b.Wait(ctx) }
	}
	services := make([]*inventory.Service, instances)
	var queues []*redisstage.RedisStream
	for i := range services {
		st := sc.build(env, db.Products(), opts)
		if q, ok := st.(*redisstage.RedisStream); ok {
			queues = append(queues, q)
			streamtest.StartWriter(t, ctx, q, db.Products(), orderwriter.Options{})
		}
		services[i] = inventory.NewService(db.Products(), map[string]inventory.Stage{sc.stage: st}, fmt.Sprintf("i%d", i), "O")
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	var ok, soldOut atomic.Int64
	errs := make(chan error, raceBuyers)
	for b := 0; b < raceBuyers; b++ {
		wg.Add(1)
		go func(b int) {
			defer wg.Done()
			<-start
			_, err := services[b%instances].Buy(ctx, sc.stage, inventory.Request{ItemID: id, UserID: fmt.Sprintf("u%d", b), Quantity: 1})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, inventory.ErrSoldOut):
				soldOut.Add(1)
			default:
				errs <- err
			}
		}(b)
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("unexpected error: %v", err)
	}
	for _, q := range queues {
		streamtest.WaitDrained(t, ctx, q, id)
	}

	a, err := db.Products().Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s x%d: ok=%d sold-out=%d audit=%+v oversold=%d conserved=%v", sc.stage, instances, ok.Load(), soldOut.Load(), a, a.Oversold(), a.Conserved())
	if int64(a.Orders) != ok.Load() {
		t.Errorf("every success must have exactly one order: %d successes, %d orders", ok.Load(), a.Orders)
	}
	if safe {
		if a.Oversold() != 0 || !a.Conserved() || a.Sold != raceStock || a.Stock != 0 {
			t.Errorf("safe stage failed: oversold=%d conserved=%v sold=%d stock=%d", a.Oversold(), a.Conserved(), a.Sold, a.Stock)
		}
		return
	}
	if a.Oversold() == 0 {
		t.Errorf("the forced interleaving must oversell %s with %d instance(s), got sold=%d of %d", sc.stage, instances, a.Sold, raceStock)
	}
}
