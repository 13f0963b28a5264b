package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/reconcile"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestOneRunPerIntervalAcrossTheFleet: three instances' jobs against one
// Redis. Each of ten slots, tried by all three at once behind a barrier,
// runs on exactly one of them; then their Run loops, on the clock, run
// slot after slot, never one twice. Whether a loop reaches every slot is
// left out: a machine stalled for longer than an interval rightly skips
// one, and a test that counted on it failed beside CPU hogs. The wait for
// the loops follows their runs: it ends at the fifth, and gives up only
// when no run at all came for a minute, however long the five take.
func TestOneRunPerIntervalAcrossTheFleet(t *testing.T) {
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	prefix := testenv.Name("rec") + ":"
	items := inventory.NewService(db.Products(), nil, "x", "O")
	const interval = 300 * time.Millisecond

	var mu sync.Mutex
	runs := map[int64][]string{}
	progress := make(chan struct{}, 1) // a run happened since the last look
	fleet := func(interval time.Duration) []*reconcile.Job {
		var jobs []*reconcile.Job
		for i := 0; i < 3; i++ {
			name := fmt.Sprintf("i%d", i)
			locker := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix + "lock:"})
			t.Cleanup(func() { _ = locker.Close() })
			jobs = append(jobs, reconcile.New(locker, rdb, []reconcile.Target{{Kind: "product", Items: items}}, reconcile.Options{
				Interval: interval, Instance: name, Prefix: prefix,
				OnRun: func(r reconcile.Result) {
					mu.Lock()
					runs[r.Slot] = append(runs[r.Slot], name)
					mu.Unlock()
					select {
					case progress <- struct{}{}:
					default:
					}
				},
			}))
		}
		return jobs
	}

	// Slots far below the clock's, so that the loops below never meet them.
	slotJobs := fleet(time.Minute)
	for slot := int64(1); slot <= 10; slot++ {
		start := make(chan struct{})
		ran := make(chan bool, len(slotJobs))
		for _, j := range slotJobs {
			go func() {
				<-start
				_, r, err := j.RunSlot(context.Background(), slot)
				if err != nil {
					t.Errorf("slot %d: %v", slot, err)
				}
				ran <- r
			}()
		}
		close(start)
		n := 0
		for range slotJobs {
			if <-ran {
				n++
			}
		}
		mu.Lock()
		who := runs[slot]
		mu.Unlock()
		if n != 1 || len(who) != 1 {
			t.Errorf("slot %d, tried by three at once: %d said they ran it, runs %v; want one", slot, n, who)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, j := range fleet(interval) {
		wg.Add(1)
		go func() { defer wg.Done(); j.Run(ctx) }()
	}
	clocked := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for slot := range runs {
			if slot > 10 {
				n++
			}
		}
		return n
	}
	ok := true
	for ok && clocked() < 5 {
		select {
		case <-progress:
		case <-time.After(time.Minute):
			ok = clocked() >= 5 // no run for a minute: the loops stopped
		}
	}
	cancel()
	wg.Wait()
	if !ok {
		t.Fatalf("the fleet's loops ran %d slots, then none for a minute (%v intervals); want 5", clocked(), interval)
	}
	for slot, who := range runs {
		if len(who) != 1 {
			t.Errorf("slot %d ran %d times (%v)", slot, len(who), who)
		}
	}
	last, ok, err := reconcile.Last(context.Background(), rdb, prefix)
	if err != nil || !ok || last.Violations != 0 || last.Slot <= 10 {
		t.Fatalf("last result %+v ok=%v err=%v", last, ok, err)
	}
}

// TestLateJobDoesNotRunASlotAgain: an instance stalled (both cores
// taken, a paused VM) tries a slot after another ran it, and after every
// key of that slot's own has expired (a marker per slot, living three
// intervals, once kept slots from running twice). The slot must not run
// again. Forced by waiting for the slot's key to go, not for a length of
// time; the next slot still runs.
func TestLateJobDoesNotRunASlotAgain(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	prefix := testenv.Name("rec") + ":"
	items := inventory.NewService(db.Products(), nil, "x", "O")
	const interval = 100 * time.Millisecond // a marker then lives 1.3 s
	job := func(name string) *reconcile.Job {
		locker := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix + "lock:"})
		t.Cleanup(func() { _ = locker.Close() })
		return reconcile.New(locker, rdb, []reconcile.Target{{Kind: "product", Items: items}}, reconcile.Options{
			Interval: interval, Instance: name, Prefix: prefix,
		})
	}
	first, late := job("first"), job("late")
	const slot = 7
	if _, ran, err := first.RunSlot(ctx, slot); err != nil || !ran {
		t.Fatalf("the first instance's run of slot %d: ran=%v err=%v", slot, ran, err)
	}
	marker := prefix + "slot:" + strconv.Itoa(slot)
	if !testkit.Poll(time.Minute, func() bool { n, err := rdb.Exists(ctx, marker).Result(); return err == nil && n == 0 }) {
		t.Fatalf("the key %s of slot %d never expired", marker, slot)
	}
	if _, ran, err := late.RunSlot(ctx, slot); err != nil || ran {
		t.Errorf("an instance late for slot %d, after the first ran it and its marker expired: ran=%v err=%v; want not run again", slot, ran, err)
	}
	if _, ran, err := late.RunSlot(ctx, slot+1); err != nil || !ran {
		t.Errorf("the next slot: ran=%v err=%v; want run", ran, err)
	}
}

// TestRepairsRedisAtomicDrift breaks the Redis copy of the stock in two
// ways (a reservation whose process died, a copy that drifted) and checks
// that one run repairs both and reports the conservation of the database.
func TestRepairsRedisAtomicDrift(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	ns := testenv.Name("p")
	prefix := testenv.Name("rec") + ":"
	ra := redisstage.NewRedisAtomic(rdb, db.Products(), ns, nil)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": ra}, "x", "O")
	if err := svc.Reset(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Buy(ctx, "redis-atomic", inventory.Request{ItemID: 1, UserID: "a", Quantity: 2}); err != nil {
		t.Fatal(err)
	}
	stockKey := "seckill:{" + ns + ":1}:stock"
	pendingKey := "seckill:{" + ns + ":1}:pending"
	// A reservation of 3 units whose process died before the database write.
	old := time.Now().Add(-time.Hour).UnixMilli()
	if err := rdb.HSet(ctx, pendingKey, "O-dead", fmt.Sprintf("3|%d|ghost", old)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.DecrBy(ctx, stockKey, 3).Err(); err != nil {
		t.Fatal(err)
	}
	locker := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix + "lock:"})
	defer locker.Close()
	job := reconcile.New(locker, rdb, []reconcile.Target{{Kind: "product", Items: svc, Repairer: ra, OrderExists: db.Products().OrderExists}},
		reconcile.Options{Interval: time.Second, Instance: "x", Prefix: prefix})
	res, ran, err := job.RunSlot(ctx, 1)
	if err != nil || !ran {
		t.Fatalf("run: ran=%v err=%v", ran, err)
	}
	if got, _ := rdb.Get(ctx, stockKey).Int(); got != 8 {
		t.Fatalf("the dead reservation must be given back: redis stock %d, want 8", got)
	}
	// Now the copy drifts (say, a lost give-back): the next run corrects it.
	if err := rdb.Set(ctx, stockKey, 5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, ran, err = job.RunSlot(ctx, 2)
	if err != nil || !ran {
		t.Fatalf("run: ran=%v err=%v", ran, err)
	}
	if got, _ := rdb.Get(ctx, stockKey).Int(); got != 8 {
		t.Fatalf("drift must be repaired to the database stock: %d, want 8", got)
	}
	item := res.Items[0]
	if !item.Conserved || item.Oversold != 0 || item.Drift == nil || !item.Drift.Repaired || res.Repairs != 1 {
		t.Fatalf("result %+v drift %+v", res, item.Drift)
	}
	if _, ran, _ := job.RunSlot(ctx, 2); ran {
		t.Fatal("a slot must not run twice")
	}
}

// violate makes product 1 break conservation: one unit leaves the stock
// with no order for it.
func violate(t *testing.T, db interface {
	Exec(context.Context, string, ...any) error
}) {
	t.Helper()
	if err := db.Exec(context.Background(), "UPDATE products SET stock = stock - 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
}

// TestFindingsAndLogsFollowTheItem: a violation is logged naming its item,
// once, not again on each run while it stays the same; a reset hides the
// finding from before it in the audit, and the next run reports the item
// clean and says the violation is gone.
func TestFindingsAndLogsFollowTheItem(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	prefix := testenv.Name("rec") + ":"
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	items := inventory.NewService(db.Products(), nil, "x", "O").OnReset(func(ctx context.Context, id int64) error {
		return reconcile.MarkReset(ctx, rdb, prefix, "product", id)
	})
	if err := items.Reset(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	locker := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix + "lock:"})
	defer locker.Close()
	job := reconcile.New(locker, rdb, []reconcile.Target{{Kind: "product", Items: items}}, reconcile.Options{
		Interval: time.Second, Instance: "i1", Prefix: prefix, Logger: log,
	})
	slot := time.Now().UnixNano()
	run := func() {
		t.Helper()
		slot++
		if _, ran, err := job.RunSlot(ctx, slot); err != nil || !ran {
			t.Fatalf("run: ran=%v err=%v", ran, err)
		}
	}
	finding := func() (reconcile.Finding, bool) {
		t.Helper()
		f, ok, err := reconcile.LastFor(ctx, rdb, prefix, "product", 1)
		if err != nil {
			t.Fatal(err)
		}
		return f, ok
	}

	violate(t, db)
	run()
	run()
	run()
	if n := strings.Count(logs.String(), "reconcile found a violation"); n != 1 {
		t.Fatalf("a violation that stays the same must be logged once, got %d:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "item=1") || !strings.Contains(logs.String(), "kind=product") {
		t.Fatalf("the log must name the item:\n%s", logs.String())
	}
	if f, ok := finding(); !ok || f.Item.Conserved {
		t.Fatalf("before the reset the audit shows the violation: %+v ok=%v", f, ok)
	}

	if err := items.Reset(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	if f, ok := finding(); ok {
		t.Fatalf("right after a reset the audit must not show the finding from before it: %+v", f)
	}
	run()
	if f, ok := finding(); !ok || !f.Item.Conserved {
		t.Fatalf("the first run after the reset is shown: %+v ok=%v", f, ok)
	}
	if !strings.Contains(logs.String(), "violation gone") {
		t.Fatalf("a violation that went away is logged once:\n%s", logs.String())
	}
}

// TestRepairsRedisShardedBuckets breaks redis-sharded's buckets three ways
// (a reservation whose process died, a bucket that lost units, every
// bucket gone) and checks that each run repairs the sum of the buckets to
// the database stock, with the dead reservation's unit back in its bucket
// and its buyer free to buy.
func TestRepairsRedisShardedBuckets(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	ns := testenv.Name("p")
	prefix := testenv.Name("rec") + ":"
	rs := redisstage.NewRedisSharded(rdb, db.Products(), ns, 4, nil)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: rs}, "x", "O")
	if err := svc.Reset(ctx, 1, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: 1, UserID: "a", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	bucket := func(b int, name string) string { return fmt.Sprintf("seckill:{%s:1:b%d}:%s", ns, b, name) }
	sum := func() int {
		t.Helper()
		n := 0
		for b := range 4 {
			v, err := rdb.Get(ctx, bucket(b, "stock")).Int()
			if err != nil {
				t.Fatalf("bucket %d: %v", b, err)
			}
			n += v
		}
		return n
	}
	// A reservation of 1 unit in bucket 2 whose process died before the
	// database write; its buyer is recorded in bucket 2, its home.
	ghost := ""
	for i := 0; ghost == ""; i++ {
		if u := fmt.Sprintf("ghost%d", i); rs.Home(u) == 2 {
			ghost = u
		}
	}
	old := time.Now().Add(-time.Hour).UnixMilli()
	for _, err := range []error{
		rdb.HSet(ctx, bucket(2, "pending"), "O-dead", fmt.Sprintf("1|%d|%s", old, ghost)).Err(),
		rdb.DecrBy(ctx, bucket(2, "stock"), 1).Err(),
		rdb.SAdd(ctx, bucket(2, "buyers"), ghost).Err(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	locker := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix + "lock:"})
	defer locker.Close()
	job := reconcile.New(locker, rdb, []reconcile.Target{{Kind: "product", Items: svc, Buckets: rs, OrderExists: db.Products().OrderExists}},
		reconcile.Options{Interval: time.Second, Instance: "x", Prefix: prefix})
	run := func(slot int64) reconcile.ItemResult {
		t.Helper()
		res, ran, err := job.RunSlot(ctx, slot)
		if err != nil || !ran || len(res.Items) == 0 || res.Items[0].ID != 1 || res.Items[0].BucketDrift == nil {
			t.Fatalf("run %d: ran=%v err=%v result %+v", slot, ran, err, res)
		}
		return res.Items[0]
	}
	if it := run(1); it.BucketDrift.Resolved != 1 || sum() != 7 || !it.Conserved {
		t.Fatalf("the dead reservation must be given back: %+v, buckets hold %d, want 7", it.BucketDrift, sum())
	}
	if rdb.SIsMember(ctx, bucket(2, "buyers"), ghost).Val() {
		t.Fatal("the dead reservation's buyer must be free to buy again")
	}
	// A bucket loses its units (say, a lost give-back): the sum is short.
	lost, err := rdb.GetSet(ctx, bucket(0, "stock"), 0).Int()
	if err != nil || lost == 0 {
		t.Fatalf("bucket 0 held %d (%v); the test needs units there", lost, err)
	}
	if it := run(2); !it.BucketDrift.Repaired || it.BucketDrift.RedisStock != 7-lost || it.BucketDrift.DBStock != 7 || sum() != 7 {
		t.Fatalf("a short sum must be repaired: %+v, buckets hold %d, want 7", it.BucketDrift, sum())
	}
	// Too many units in the buckets are taken from those that hold them.
	if err := rdb.IncrBy(ctx, bucket(3, "stock"), 5).Err(); err != nil {
		t.Fatal(err)
	}
	if it := run(3); !it.BucketDrift.Repaired || sum() != 7 {
		t.Fatalf("an excess must be repaired: %+v, buckets hold %d, want 7", it.BucketDrift, sum())
	}
	// Every bucket gone (Redis lost its data): split the database stock.
	for b := range 4 {
		if err := rdb.Del(ctx, bucket(b, "stock"), bucket(b, "pending"), bucket(b, "buyers")).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if it := run(4); !it.BucketDrift.Repaired || it.BucketDrift.RedisStock != -1 || sum() != 7 {
		t.Fatalf("lost buckets must be reloaded: %+v, buckets hold %d, want 7", it.BucketDrift, sum())
	}
	if it := run(5); it.BucketDrift.Repaired || it.BucketDrift.Busy || it.BucketDrift.RedisStock != 7 {
		t.Fatalf("a quiet, correct item needs no repair: %+v", it.BucketDrift)
	}
	// The buyer of before is known again after the reload.
	if _, err := svc.Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: 1, UserID: "a", Quantity: 1}); !errors.Is(err, inventory.ErrAlreadyPurchased) {
		t.Fatalf("the earlier buyer after the reload: %v", err)
	}
}
