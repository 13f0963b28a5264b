package redisstage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// replicaWait bounds the tests' WAITs: long enough that a running replica
// confirms even on a loaded machine. A stopped replica never does, so its
// length changes only how long a test waits for that answer.
const replicaWait = 2 * time.Second

// durableEnv is redis-stream at durability d on a Redis server of the
// test's own (p), with the SQL file as the database.
func durableEnv(t *testing.T, p *testenv.RedisProcess, d redisstage.Durability) (*streamtest.Env, streamtest.Instance) {
	t.Helper()
	return durableEnvTB(t, p, d)
}

// durableEnvTB is durableEnv for a test or a benchmark, with stock enough
// for any benchmark.
func durableEnvTB(t testing.TB, p *testenv.RedisProcess, d redisstage.Durability) (*streamtest.Env, streamtest.Instance) {
	t.Helper()
	rdb := redis.NewClient(lock.ClientOptions(&redis.Options{Addr: p.Addr}))
	t.Cleanup(func() { _ = rdb.Close() })
	e := &streamtest.Env{DB: testenv.SQLite(t), RDB: rdb, NS: testenv.Name("d-"), ID: 1,
		Opts: redisstage.StreamOptions{Durability: d, ReplicaWait: replicaWait, MaxLen: 100_000_000}}
	if err := e.DB.Products().Reset(context.Background(), e.ID, 10_000_000); err != nil {
		t.Fatal(err)
	}
	return e, e.Instance("i1", inventory.Lifecycle{})
}

// At durability replica a buy is accepted only once WAIT, pipelined behind
// the script, counted a replica that has the order: with the replica's
// process stopped, the order is queued on the primary but the buyer is
// told the outcome is unknown (ErrOutcomeUnknown, the API's 503 outcome-unknown),
// never accepted, and so is the buyer's retry, which finds the order
// queued. Before, and once the replica runs again, buys (and that retry)
// are accepted, and the replica holds each accepted order the moment the
// buy returns.
func TestStreamReplicaDurabilityAcceptsOnlyWhatAReplicaHas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a replica and stops it mid-sale; left to the full tier")
	}
	t.Parallel()
	primary, replica := testenv.StartReplicaPair(t)
	e, in := durableEnv(t, primary, redisstage.DurabilityReplica)
	ctx := context.Background()
	if err := in.Stream.CheckDurability(ctx); err != nil {
		t.Fatalf("a server with WAIT must pass the check: %v", err)
	}
	onReplica := func(o inventory.Order) bool {
		ok, err := replica.Client().HExists(ctx, e.Key("queued"), o.No).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	o, err := in.Service.Buy(ctx, inventory.StageRedisStream, inventory.Request{ItemID: 1, UserID: "before", Quantity: 1})
	if err != nil {
		t.Fatalf("with the replica up: %v", err)
	}
	if !onReplica(o) {
		t.Fatalf("order %s was accepted before the replica had it", o.No)
	}

	replica.Pause()
	held := inventory.Request{ItemID: 1, UserID: "held", Quantity: 1}
	_, err = in.Service.Buy(ctx, inventory.StageRedisStream, held)
	// The buyer retries with the same Idempotency-Key, whose outcome is
	// unknown: the order is queued, but still on no replica.
	_, rerr := in.Service.Buy(inventory.WithRetry(ctx), inventory.StageRedisStream, held)
	replica.Resume()
	if err == nil {
		t.Fatal("a buy no replica confirmed was accepted")
	}
	if !errors.Is(err, inventory.ErrOutcomeUnknown) {
		t.Fatalf("want ErrOutcomeUnknown (503 outcome-unknown, key outcome unknown), got %v", err)
	}
	if !errors.Is(rerr, inventory.ErrOutcomeUnknown) {
		t.Fatalf("the retry of an unconfirmed order: want ErrOutcomeUnknown, got %v", rerr)
	}
	if n, _, err := in.Stream.Backlog(ctx, 1); err != nil || n != 2 {
		t.Fatalf("the unconfirmed order must still be queued on the primary (the writers serve it): backlog %d, %v", n, err)
	}

	testenv.WaitReplicaSynced(t, replica)
	o, err = in.Service.Buy(inventory.WithRetry(ctx), inventory.StageRedisStream, held)
	if err != nil || o.Status != inventory.StatusPending || !onReplica(o) {
		t.Fatalf("the retry once the replica has the order: %+v, %v", o, err)
	}
	o, err = in.Service.Buy(ctx, inventory.StageRedisStream, inventory.Request{ItemID: 1, UserID: "after", Quantity: 1})
	if err != nil {
		t.Fatalf("with the replica back: %v", err)
	}
	if !onReplica(o) {
		t.Fatalf("order %s was accepted before the replica had it", o.No)
	}
}

// The script's cache is per server: a primary that never saw the script
// (a restart, a failover) gets it whole once, and the buy still waits for
// the replica.
func TestStreamReplicaDurabilityAfterScriptFlush(t *testing.T) {
	t.Parallel()
	primary, _ := testenv.StartReplicaPair(t)
	e, in := durableEnv(t, primary, redisstage.DurabilityReplica)
	ctx := context.Background()
	if err := e.RDB.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Service.Buy(ctx, inventory.StageRedisStream, inventory.Request{ItemID: 1, UserID: "u", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
}

// At durability fsync the app refuses to start unless Redis answers writes
// only after they are in its append-only file on disk.
func TestStreamFsyncDurabilityNeedsAppendfsyncAlways(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"no aof", nil, false},
		{"aof everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, false},
		{"aof always", []string{"--appendonly", "yes", "--appendfsync", "always"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, in := durableEnv(t, testenv.StartRedis(t, tc.args...), redisstage.DurabilityFsync)
			err := in.Stream.CheckDurability(context.Background())
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, redisstage.ErrNotDurable) {
				t.Fatalf("want ErrNotDurable, got %v", err)
			}
		})
	}
}

// With lock replica sync, a grant no replica confirmed is given back: the
// redis-lock stage answers it as an outage (503 unavailable, nothing
// sold), not as a busy lock (429). The lock wait is long, so that the
// stage's own line of buyers never turns the buy away first on a busy
// machine: the answer must come from the replica check.
func TestRedisLockStageAnswersAnUnreplicatedGrantUnavailable(t *testing.T) {
	t.Parallel()
	primary, replica := testenv.StartReplicaPair(t)
	rdb := redis.NewClient(lock.ClientOptions(&redis.Options{Addr: primary.Addr}))
	t.Cleanup(func() { _ = rdb.Close() })
	db := testenv.SQLite(t)
	if err := db.Products().Reset(context.Background(), 1, 10); err != nil {
		t.Fatal(err)
	}
	stage := inventory.NewRedisLock(testenv.NewLock(t, rdb, lock.Options{Replicas: 1, ReplicaTimeout: 100 * time.Millisecond}),
		db.Products(), "product-"+testenv.Name(""), inventory.SectionOptions{}, inventory.LockOptions{TTL: 5 * time.Second, Wait: time.Minute})
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisLock: stage}, "i1", "O")
	replica.Pause()
	_, err := svc.Buy(context.Background(), inventory.StageRedisLock, inventory.Request{ItemID: 1, UserID: "u", Quantity: 1})
	replica.Resume()
	if !errors.Is(err, inventory.ErrUnavailable) || errors.Is(err, inventory.ErrLockTimeout) {
		t.Fatalf("want ErrUnavailable (not ErrLockTimeout), got %v", err)
	}
	if a, err := db.Products().Audit(context.Background(), 1); err != nil || a.Orders != 0 {
		t.Fatalf("something was sold without a confirmed lock: %+v, %v", a, err)
	}
}
