package reconcile_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/reconcile"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// commands counts the commands a client sends, pipelined ones each.
type commands struct{ n atomic.Int64 }

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// quietRig is a catalogue of 2,000 products of which 20 (ids 1..20) have
// a redis-atomic copy (reset to 10, one unit of each bought), and a
// reconcile job whose every Redis command is counted.
type quietRig struct {
	ctx   context.Context
	rdb   *redis.Client
	ns    string
	cmds  *commands
	count *counted
	job   *reconcile.Job
	slot  int64
	svc   *inventory.Service
	order map[int64]string // each item's order
}

const quietCopies = 20

func newQuietRig(t *testing.T) *quietRig {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	if _, err := db.Products().LoadCatalogue(ctx, 2000, 100); err != nil {
		t.Fatal(err)
	}
	r := &quietRig{ctx: ctx, rdb: rdb, ns: testenv.Name("p"), cmds: &commands{}, slot: time.Now().UnixNano(), order: map[int64]string{}}
	counting := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, MaxRetries: -1})
	counting.AddHook(r.cmds)
	t.Cleanup(func() { _ = counting.Close() })
	ra := redisstage.NewRedisAtomic(counting, db.Products(), r.ns, nil)
	t.Cleanup(func() { _ = rdb.Del(ctx, "seckill:copies:redis-atomic:"+r.ns).Err() })
	r.svc = inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisAtomic: ra}, "x", "O")
	for id := int64(1); id <= quietCopies; id++ {
		if err := r.svc.Reset(ctx, id, 10); err != nil {
			t.Fatal(err)
		}
		o, err := r.svc.Buy(ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: id, UserID: "a", Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		r.order[id] = o.No
	}
	prefix := testenv.Name("rec") + ":"
	locker := testenv.NewLock(t, counting, lock.Options{Prefix: prefix + "lock:"})
	t.Cleanup(func() { _ = locker.Close() })
	r.count = &counted{Auditor: r.svc, Repairer: ra}
	r.job = reconcile.New(locker, counting, []reconcile.Target{{Kind: "product", Items: r.count, Repairer: r.count, OrderExists: db.Products().OrderExists}},
		reconcile.Options{Interval: time.Second, Instance: "x", Prefix: prefix})
	return r
}

// run runs one slot and returns its result and the commands it sent.
func (r *quietRig) run(t *testing.T) (reconcile.Result, int64) {
	t.Helper()
	r.slot++
	r.count.audits, r.count.repairs = nil, nil
	before := r.cmds.n.Load()
	res, ran, err := r.job.RunSlot(r.ctx, r.slot)
	if err != nil || !ran {
		t.Fatalf("run: ran=%v err=%v", ran, err)
	}
	return res, r.cmds.n.Load() - before
}

func (r *quietRig) key(id int64, name string) string {
	return "seckill:{" + r.ns + ":" + strconv.FormatInt(id, 10) + "}:" + name
}

// TestQuietCopiesCostAProbeEach: 20 copies registered, in a catalogue of
// 2,000, nothing bought since the job checked them in full. The next run
// repairs and audits none of them and sends one command per copy (its
// probe) and a constant (the lock, the slot, the registry, the
// publication): 27 here. Before, it repaired and audited all 20 again:
// 107 commands.
func TestQuietCopiesCostAProbeEach(t *testing.T) {
	r := newQuietRig(t)
	if res, _ := r.run(t); len(r.count.repairs) != quietCopies || res.Violations != 0 {
		t.Fatalf("the first run repaired %d copies, %d violations; want all %d checked in full, clean", len(r.count.repairs), res.Violations, quietCopies)
	}
	for i := range 2 {
		res, n := r.run(t)
		if len(r.count.repairs) != 0 || len(r.count.audits) != 0 || res.Violations != 0 {
			t.Errorf("quiet run %d repaired %v and audited %v (%d violations); want nothing", i+1, r.count.repairs, r.count.audits, res.Violations)
		}
		if n > quietCopies+10 {
			t.Errorf("quiet run %d sent %d Redis commands for %d quiet copies; want at most %d", i+1, n, quietCopies, quietCopies+10)
		}
	}
}

// TestStaleReservationOnAQuietCopyIsSettled: a reservation that a crashed
// instance left on a quiet copy (its buy never reached the activity set)
// is settled by the next run: its order exists, so it is confirmed.
func TestStaleReservationOnAQuietCopyIsSettled(t *testing.T) {
	r := newQuietRig(t)
	r.run(t)
	r.run(t)
	old := time.Now().Add(-time.Hour).UnixMilli()
	if err := r.rdb.HSet(r.ctx, r.key(5, "pending"), r.order[5], "1|"+strconv.FormatInt(old, 10)+"|a").Err(); err != nil {
		t.Fatal(err)
	}
	res, _ := r.run(t)
	if len(r.count.repairs) != 1 || r.count.repairs[0] != 5 {
		t.Errorf("the run repaired %v; want product 5, whose copy holds a stale reservation", r.count.repairs)
	}
	if n, err := r.rdb.HLen(r.ctx, r.key(5, "pending")).Result(); err != nil || n != 0 {
		t.Errorf("reservations left: %d, %v; want the stale one settled", n, err)
	}
	if res.Repairs != 1 {
		t.Errorf("result %+v; want one repair", res)
	}
}

// TestCopyChangedBehindTheJobsBackIsCheckedInFull: a quiet copy's stock
// is changed with no buy and no reset (a bug, an operator's SET). The
// next run checks it in full and puts the database's stock back.
func TestCopyChangedBehindTheJobsBackIsCheckedInFull(t *testing.T) {
	r := newQuietRig(t)
	r.run(t)
	r.run(t)
	if err := r.rdb.Set(r.ctx, r.key(9, "stock"), 50, 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, _ := r.run(t)
	if len(r.count.repairs) != 1 || r.count.repairs[0] != 9 || len(res.Items) != 1 || res.Items[0].Drift == nil || !res.Items[0].Drift.Repaired {
		t.Fatalf("the run repaired %v, result %+v; want product 9 repaired", r.count.repairs, res)
	}
	if n, err := r.rdb.Get(r.ctx, r.key(9, "stock")).Int(); err != nil || n != 9 {
		t.Errorf("product 9's copy: %d, %v; want 9, the database's stock", n, err)
	}
	if r.run(t); len(r.count.repairs) != 1 {
		t.Errorf("the run after the repair checked %v; want product 9 once more (its repair changed it)", r.count.repairs)
	}
	if r.run(t); len(r.count.repairs) != 0 {
		t.Errorf("then %v; want nothing", r.count.repairs)
	}
}
