package reconcile_test

import (
	"context"
	"errors"
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
	ctx      context.Context
	rdb      redis.UniversalClient
	ns       string
	prefix   string
	stale    time.Duration // the job's StaleAfter
	counting redis.UniversalClient
	ra       *redisstage.RedisAtomic // the redis-atomic stage, nil under redis-sharded
	cmds     *commands
	count    *counted
	job      *reconcile.Job
	other    *reconcile.Job // the same job on another instance
	slot     int64
	svc      *inventory.Service
	order    map[int64]string // each item's order
	stage    string           // redis-atomic, or redis-sharded over 4 buckets
	per      int64            // probes per copy: 1, or one per bucket
}

// stages are the two copies the job probes: redis-atomic's (redis-stream
// sells from it too) and redis-sharded's buckets.
var stages = []string{inventory.StageRedisAtomic, inventory.StageRedisSharded}

const quietCopies = 20

func newQuietRig(t *testing.T, stage string) *quietRig {
	rdb := testenv.Redis(t)
	counting := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, MaxRetries: -1})
	return newQuietRigOn(t, stage, rdb, counting)
}

// newQuietRigOn is a quietRig on Redis rdb, whose job and stage send
// through counting, another client of the same Redis (or Cluster).
func newQuietRigOn(t *testing.T, stage string, rdb, counting redis.UniversalClient) *quietRig {
	ctx := context.Background()
	db := testenv.SQLite(t)
	if _, err := db.Products().LoadCatalogue(ctx, 2000, 100); err != nil {
		t.Fatal(err)
	}
	r := &quietRig{stale: time.Second, counting: counting, ctx: ctx, rdb: rdb, ns: testenv.Name("p"), cmds: &commands{}, slot: time.Now().UnixNano(), order: map[int64]string{}, stage: stage, per: 1}
	counting.AddHook(r.cmds)
	t.Cleanup(func() { _ = counting.Close() })
	var st interface {
		inventory.Stage
		reconcile.Repairer
	} = redisstage.NewRedisAtomic(counting, db.Products(), r.ns, nil)
	r.ra, _ = st.(*redisstage.RedisAtomic)
	if stage == inventory.StageRedisSharded {
		st, r.per = redisstage.NewRedisSharded(counting, db.Products(), r.ns, 4, nil), 4
	}
	t.Cleanup(func() { _ = rdb.Del(ctx, "seckill:copies:"+stage+":"+r.ns).Err() })
	r.svc = inventory.NewService(db.Products(), map[string]inventory.Stage{stage: st}, "x", "O")
	for id := int64(1); id <= quietCopies; id++ {
		if err := r.svc.Reset(ctx, id, 10); err != nil {
			t.Fatal(err)
		}
		o, err := r.svc.Buy(ctx, stage, inventory.Request{ItemID: id, UserID: "a", Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		r.order[id] = o.No
	}
	prefix := testenv.Name("rec") + ":"
	r.prefix = prefix
	locker := testenv.NewLock(t, counting, lock.Options{Prefix: prefix + "lock:"})
	t.Cleanup(func() { _ = locker.Close() })
	r.count = &counted{Auditor: r.svc, Repairer: st}
	target := reconcile.Target{Kind: "product", Items: r.count, Repairer: r.count, OrderExists: db.Products().OrderExists}
	if stage == inventory.StageRedisSharded {
		target.Repairer, target.Buckets = nil, r.count
	}
	r.job = reconcile.New(locker, counting, []reconcile.Target{target},
		reconcile.Options{Interval: time.Second, Instance: "x", Prefix: prefix, StaleAfter: r.stale})
	r.other = reconcile.New(locker, counting, []reconcile.Target{target},
		reconcile.Options{Interval: time.Second, Instance: "y", Prefix: prefix, StaleAfter: r.stale})
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

// key names a key of item id's copy: of its bucket 1 under redis-sharded.
func (r *quietRig) key(id int64, name string) string {
	bucket := ""
	if r.stage == inventory.StageRedisSharded {
		bucket = ":b1"
	}
	return "seckill:{" + r.ns + ":" + strconv.FormatInt(id, 10) + bucket + "}:" + name
}

// stock is item id's stock in Redis: its copy's, or its buckets' sum.
func (r *quietRig) stock(id int64) (int, error) {
	if r.stage != inventory.StageRedisSharded {
		return r.rdb.Get(r.ctx, r.key(id, "stock")).Int()
	}
	sum := 0
	for b := range 4 {
		n, err := r.rdb.Get(r.ctx, "seckill:{"+r.ns+":"+strconv.FormatInt(id, 10)+":b"+strconv.Itoa(b)+"}:stock").Int()
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// repaired says whether a finding's copy was corrected.
func repaired(it reconcile.ItemResult) bool {
	return it.Drift != nil && it.Drift.Repaired || it.BucketDrift != nil && it.BucketDrift.Repaired
}

// each runs test over both stages.
func each(t *testing.T, test func(t *testing.T, r *quietRig)) {
	for _, st := range stages {
		t.Run(st, func(t *testing.T) { test(t, newQuietRig(t, st)) })
	}
}

// TestQuietCopiesCostAProbeEach: 20 copies registered, in a catalogue of
// 2,000, nothing bought since the job checked them in full. The next run
// repairs and audits none of them; it probes them all in one MGET, reads
// their findings in one more and vouches for them in one HSET, so it
// sends fewer commands than there are copies (12 here, for redis-atomic's
// copies and redis-sharded's 80 buckets alike: the lock, the slot, the
// registry, the fleet's memory, the publication). Before quiet copies, it
// repaired and audited all 20 again: 107 and 387 commands; with one MGET
// per copy and a finding republished each, 68 and 128.
func TestQuietCopiesCostAProbeEach(t *testing.T) { each(t, quietCopiesCostAProbeEach) }

func quietCopiesCostAProbeEach(t *testing.T, r *quietRig) {
	if res, _ := r.run(t); len(r.count.repairs) != quietCopies || res.Violations != 0 {
		t.Fatalf("the first run repaired %d copies, %d violations; want all %d checked in full, clean", len(r.count.repairs), res.Violations, quietCopies)
	}
	for i := range 2 {
		res, n := r.run(t)
		if len(r.count.repairs) != 0 || len(r.count.audits) != 0 || res.Violations != 0 {
			t.Errorf("quiet run %d repaired %v and audited %v (%d violations); want nothing", i+1, r.count.repairs, r.count.audits, res.Violations)
		}
		if want := int64(quietCopies) - 5; n > want {
			t.Errorf("quiet run %d sent %d Redis commands for %d quiet copies; want at most %d", i+1, n, quietCopies, want)
		}
	}
}

// TestStaleReservationOnAQuietCopyIsSettled: an instance crashed
// between its reservation on a quiet copy and its order (its buy never
// reached the activity set). The reservation took a unit from the stock,
// so the next run checks the copy in full, and gives the unit back once
// the reservation is stale.
func TestStaleReservationOnAQuietCopyIsSettled(t *testing.T) {
	each(t, staleReservationOnAQuietCopyIsSettled)
}

func staleReservationOnAQuietCopyIsSettled(t *testing.T, r *quietRig) {
	r.run(t)
	r.run(t)
	old := time.Now().Add(-time.Hour).UnixMilli()
	if err := r.rdb.DecrBy(r.ctx, r.key(5, "stock"), 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.HSet(r.ctx, r.key(5, "pending"), "O-crashed", "1|"+strconv.FormatInt(old, 10)+"|z").Err(); err != nil {
		t.Fatal(err)
	}
	res, _ := r.run(t)
	if len(r.count.repairs) != 1 || r.count.repairs[0] != 5 || res.Repairs != 1 {
		t.Errorf("the run repaired %v (%d repairs); want product 5, whose copy holds a stale reservation", r.count.repairs, res.Repairs)
	}
	if n, err := r.rdb.HLen(r.ctx, r.key(5, "pending")).Result(); err != nil || n != 0 {
		t.Errorf("reservations left: %d, %v; want the stale one settled", n, err)
	}
	if n, err := r.stock(5); err != nil || n != 9 {
		t.Errorf("product 5's copy: %d, %v; want 9, the unit given back", n, err)
	}
}

// TestCopyChangedBehindTheJobsBackIsCheckedInFull: a quiet copy's stock
// is changed with no buy and no reset (a bug, an operator's SET). The
// next run checks it in full and puts the database's stock back.
func TestCopyChangedBehindTheJobsBackIsCheckedInFull(t *testing.T) {
	each(t, copyChangedBehindTheJobsBackIsCheckedInFull)
}

func copyChangedBehindTheJobsBackIsCheckedInFull(t *testing.T, r *quietRig) {
	r.run(t)
	r.run(t)
	if err := r.rdb.Set(r.ctx, r.key(9, "stock"), 50, 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, _ := r.run(t)
	if len(r.count.repairs) != 1 || r.count.repairs[0] != 9 || len(res.Items) != 1 || !repaired(res.Items[0]) {
		t.Fatalf("the run repaired %v, result %+v; want product 9 repaired", r.count.repairs, res)
	}
	if n, err := r.stock(9); err != nil || n != 9 {
		t.Errorf("product 9's copy: %d, %v; want 9, the database's stock", n, err)
	}
	if r.run(t); len(r.count.repairs) != 1 {
		t.Errorf("the run after the repair checked %v; want product 9 once more (its repair changed it)", r.count.repairs)
	}
	if r.run(t); len(r.count.repairs) != 0 {
		t.Errorf("then %v; want nothing", r.count.repairs)
	}
}

// TestAnotherInstanceTrustsTheFleetsMemory: the job runs on whichever
// instance wins the slot. Once one instance checked the 20 copies in
// full, a run on another repairs none of them: which copies were found
// clean, and in what state, is remembered in Redis for the fleet.
func TestAnotherInstanceTrustsTheFleetsMemory(t *testing.T) { each(t, anotherInstanceTrusts) }

func anotherInstanceTrusts(t *testing.T, r *quietRig) {
	r.run(t)
	r.job, r.other = r.other, r.job
	if res, _ := r.run(t); len(r.count.repairs) != 0 || res.Instance != "y" {
		t.Errorf("the other instance's run (%s) repaired %v; want none", res.Instance, r.count.repairs)
	}
}

// TestQuietRunVouchesForEachFinding: a run that finds a copy quiet does
// not check it again, but the item's finding must still say that a run
// after the last buy looked at it (an audit after a burst waits for one).
// The quiet run republishes product 3's finding under its own time, with
// the full check's time as CheckedAt. Before, the finding kept the full
// check's time forever.
func TestQuietRunVouchesForEachFinding(t *testing.T) { each(t, quietRunVouches) }

func quietRunVouches(t *testing.T, r *quietRig) {
	full, _ := r.run(t)
	quietRun, _ := r.run(t)
	if len(r.count.repairs) != 0 {
		t.Fatalf("the second run repaired %v; want every copy quiet", r.count.repairs)
	}
	f, ok, err := reconcile.LastFor(r.ctx, r.rdb, r.prefix, "product", 3)
	if err != nil || !ok {
		t.Fatalf("product 3's finding: ok=%v err=%v", ok, err)
	}
	if !f.At.Equal(quietRun.At) || !f.CheckedAt.Equal(full.At) || !f.Item.Conserved || f.Item.ID != 3 {
		t.Errorf("product 3's finding: at %v, checked at %v, %+v; want at the quiet run's %v, checked at the full run's %v, conserved",
			f.At, f.CheckedAt, f.Item, quietRun.At, full.At)
	}
}

// TestQuietCopyWithoutAFindingIsCheckedInFull: a quiet copy whose finding
// is gone (expired, deleted) has nothing to vouch for: the run checks it
// in full and publishes a fresh finding.
func TestQuietCopyWithoutAFindingIsCheckedInFull(t *testing.T) { each(t, quietWithoutFinding) }

func quietWithoutFinding(t *testing.T, r *quietRig) {
	r.run(t)
	r.run(t)
	if err := r.rdb.Del(r.ctx, r.prefix+"finding:product:4").Err(); err != nil {
		t.Fatal(err)
	}
	res, _ := r.run(t)
	if len(r.count.repairs) != 1 || r.count.repairs[0] != 4 {
		t.Fatalf("the run repaired %v; want product 4, whose finding was gone", r.count.repairs)
	}
	f, ok, err := reconcile.LastFor(r.ctx, r.rdb, r.prefix, "product", 4)
	if err != nil || !ok || !f.At.Equal(res.At) || !f.CheckedAt.Equal(res.At) {
		t.Errorf("product 4's finding: %+v ok=%v err=%v; want checked in full at %v", f, ok, err, res.At)
	}
}

// TestQuietCopiesOnACluster: on a Redis Cluster, where one MGET cannot
// read keys of several slots, the probe, the findings' read and the
// vouch still work: a quiet run repairs nothing and vouches for every
// finding, and a stale reservation on a quiet copy is still settled.
func TestQuietCopiesOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := testenv.StartRedisCluster(t)
	for _, st := range stages {
		t.Run(st, func(t *testing.T) {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
			counting := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, MaxRedirects: -1})
			t.Cleanup(func() { _, _ = rdb.Close(), counting.Close() })
			quietRunVouches(t, newQuietRigOn(t, st, rdb, counting))
			staleReservationOnAQuietCopyIsSettled(t, newQuietRigOn(t, st, rdb, counting))
		})
	}
}

// dropConfirms fails every pipeline that confirms reservations (an HDEL
// of a pending hash), as a connection Redis dropped does.
type dropConfirms struct{ on atomic.Bool }

func (d *dropConfirms) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (d *dropConfirms) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *dropConfirms) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if d.on.Load() && len(cmds) > 0 && cmds[0].Name() == "hdel" {
			err := errors.New("EOF (dropped by the test)")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestLostConfirmOnAQuietCopyIsSettled: a sale's confirm, sent after its
// answer, is lost (the connection it went on was dropped). The copy keeps
// the reservation: the job checks it in full at each run until it is
// stale, then keeps the unit sold (the order exists), whatever the probe
// and the fleet's memory say.
func TestLostConfirmOnAQuietCopyIsSettled(t *testing.T) {
	r := newQuietRig(t, inventory.StageRedisAtomic)
	for range 3 {
		r.run(t)
	}
	drop := &dropConfirms{}
	r.counting.AddHook(drop)
	drop.on.Store(true)
	if _, err := r.svc.Buy(r.ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: 6, UserID: "lost-confirm", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	_ = r.ra.WaitConfirms(r.ctx)
	drop.on.Store(false)
	if n, err := r.rdb.HLen(r.ctx, r.key(6, "pending")).Result(); err != nil || n != 1 {
		t.Fatalf("reservations after the lost confirm: %d, %v; want 1", n, err)
	}
	for i := 0; ; i++ {
		r.run(t)
		n, err := r.rdb.HLen(r.ctx, r.key(6, "pending")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if i == 20 {
			t.Fatalf("after %d runs, the reservation of the lost confirm is still pending", i+1)
		}
		time.Sleep(r.stale / 4)
	}
	if n, err := r.stock(6); err != nil || n != 8 {
		t.Errorf("product 6's copy: %d, %v; want 8, the unit kept sold", n, err)
	}
}

// TestUnregisteredCopyInPlayIsAdopted: a first load registers its item,
// then writes its copy; Redis restarted between the two, so the copy
// exists unregistered, and a sale's reservation in it lost its confirm.
// The item is in play (bought): the run finds its copy, registers it, and
// settles the stale reservation; a later run on another instance still
// checks it. Before, a copy missing from the registry was never repaired
// (the chaos row TestRedisKilledWhileFirstBuysLoadCopies: a reservation
// left for good).
func TestUnregisteredCopyInPlayIsAdopted(t *testing.T) {
	r := newQuietRig(t, inventory.StageRedisAtomic)
	r.job, r.other = r.other, r.job // an instance that never saw the copy
	registry := "seckill:copies:redis-atomic:" + r.ns
	if err := r.rdb.SRem(r.ctx, registry, 7).Err(); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UnixMilli()
	if err := r.rdb.DecrBy(r.ctx, r.key(7, "stock"), 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.HSet(r.ctx, r.key(7, "pending"), "O-lost-confirm", "1|"+strconv.FormatInt(old, 10)+"|z").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.SAdd(r.ctx, r.prefix+"active:product", 7).Err(); err != nil { // bought since the last run
		t.Fatal(err)
	}
	r.run(t)
	if n, err := r.rdb.HLen(r.ctx, r.key(7, "pending")).Result(); err != nil || n != 0 {
		t.Errorf("reservations left in product 7's unregistered copy: %d, %v; want the stale one settled", n, err)
	}
	if in, err := r.rdb.SIsMember(r.ctx, registry, 7).Result(); err != nil || !in {
		t.Errorf("product 7 in the registry after the run: %v, %v; want it registered again", in, err)
	}
}
