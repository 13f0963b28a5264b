package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/reconcile"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// counted is an Auditor and a Repairer that count the items they are
// asked about.
type counted struct {
	reconcile.Auditor
	reconcile.Repairer
	mu              sync.Mutex
	audits, repairs []int64
}

func (c *counted) Audit(ctx context.Context, id int64) (inventory.Audit, error) {
	c.mu.Lock()
	c.audits = append(c.audits, id)
	c.mu.Unlock()
	return c.Auditor.Audit(ctx, id)
}

func (c *counted) Repair(ctx context.Context, id int64, staleAfter time.Duration, exists func(context.Context, string) (bool, error)) (redisstage.Drift, error) {
	c.mu.Lock()
	c.repairs = append(c.repairs, id)
	c.mu.Unlock()
	return c.Repairer.Repair(ctx, id, staleAfter, exists)
}

// Probe probes through the wrapped Repairer, when it can.
func (c *counted) Probe(ctx context.Context, ids []int64) (map[int64]redisstage.Probe, error) {
	p, ok := c.Repairer.(reconcile.Prober)
	if !ok {
		return nil, errors.New("cannot probe")
	}
	return p.Probe(ctx, ids)
}

// Register registers through the wrapped Repairer, when it can.
func (c *counted) Register(ctx context.Context, id int64) error {
	r, ok := c.Repairer.(reconcile.Registrar)
	if !ok {
		return errors.New("cannot register")
	}
	return r.Register(ctx, id)
}

// catalogueRig is a catalogue of 2,000 products on SQLite, of which only
// product 7 was ever bought (reset, then one unit under redis-atomic), and
// a reconcile job over it whose audits and repairs are counted.
type catalogueRig struct {
	ctx    context.Context
	rdb    *redis.Client
	ra     *redisstage.RedisAtomic
	svc    *inventory.Service
	count  *counted
	job    *reconcile.Job
	logs   *bytes.Buffer
	ns     string
	slot   int64
	db     *store.DB
	prefix string
}

func newCatalogueRig(t *testing.T) *catalogueRig {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	if _, err := db.Products().LoadCatalogue(ctx, 2000, 100); err != nil {
		t.Fatal(err)
	}
	r := &catalogueRig{ctx: ctx, rdb: rdb, ns: testenv.Name("p"), logs: &bytes.Buffer{}, slot: time.Now().UnixNano(), db: db, prefix: testenv.Name("rec") + ":"}
	r.ra = redisstage.NewRedisAtomic(rdb, db.Products(), r.ns, nil)
	t.Cleanup(func() { _ = rdb.Del(ctx, "seckill:copies:redis-atomic:"+r.ns).Err() })
	r.svc = inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisAtomic: r.ra}, "x", "O")
	if err := r.svc.Reset(ctx, 7, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Buy(ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: 7, UserID: "a", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	prefix := r.prefix
	locker := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix + "lock:"})
	t.Cleanup(func() { _ = locker.Close() })
	r.count = &counted{Auditor: r.svc, Repairer: r.ra}
	r.job = reconcile.New(locker, rdb, []reconcile.Target{{Kind: "product", Items: r.count, Repairer: r.count, OrderExists: db.Products().OrderExists}},
		reconcile.Options{Interval: time.Second, Instance: "x", Prefix: prefix, Logger: slog.New(slog.NewTextHandler(r.logs, nil))})
	return r
}

func (r *catalogueRig) run(t *testing.T) reconcile.Result {
	t.Helper()
	r.slot++
	res, ran, err := r.job.RunSlot(r.ctx, r.slot)
	if err != nil || !ran {
		t.Fatalf("run: ran=%v err=%v", ran, err)
	}
	return res
}

// TestRunChecksTheItemsInPlayNotTheCatalogue: of 2,000 products, one was
// ever bought. A run repairs and audits that one, not the other 1,999,
// and calls none of them a lost copy: an item nobody bought has no copy
// to lose.
func TestRunChecksTheItemsInPlayNotTheCatalogue(t *testing.T) {
	r := newCatalogueRig(t)
	res := r.run(t)
	if len(r.count.audits) != 1 || len(r.count.repairs) != 1 || r.count.repairs[0] != 7 {
		t.Errorf("a run over 2,000 products, one of them ever bought, audited %d and repaired %d (%v); want product 7 alone",
			len(r.count.audits), len(r.count.repairs), r.count.repairs[:min(5, len(r.count.repairs))])
	}
	if strings.Contains(r.logs.String(), "was missing") {
		t.Errorf("items never bought were called lost copies:\n%.500s", r.logs.String())
	}
	if res.Violations != 0 || len(res.Items) != 1 || !res.Items[0].Conserved {
		t.Errorf("result %+v; want product 7, conserved", res)
	}
}

// TestRegisteredCopyThatVanishedIsALostCopy: Redis loses product 7's
// copy; once with its registry of copies kept (a key evicted), once with
// the registry lost too (a flush). Either way the next run calls it a
// lost copy, says so in the log, and loads it again.
func TestRegisteredCopyThatVanishedIsALostCopy(t *testing.T) {
	for _, registryLost := range []bool{false, true} {
		t.Run(map[bool]string{false: "registry kept", true: "registry lost"}[registryLost], func(t *testing.T) {
			r := newCatalogueRig(t)
			rdb := r.rdb // one Redis: without SECKILL_TEST_REDIS_ADDR each testenv.Redis starts its own
			r.run(t)
			stock := "seckill:{" + r.ns + ":7}:stock"
			keys := []string{stock}
			if registryLost {
				keys = append(keys, "seckill:copies:redis-atomic:"+r.ns)
			}
			if err := rdb.Del(r.ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
			res := r.run(t)
			if len(res.Items) != 1 || res.Items[0].Drift == nil || res.Items[0].Drift.RedisStock != -1 || res.Items[0].Note == "" {
				t.Fatalf("result %+v; want product 7 found missing, with a note", res)
			}
			if !strings.Contains(r.logs.String(), "was missing") {
				t.Errorf("a lost copy must be logged:\n%s", r.logs.String())
			}
			if n, err := rdb.Get(r.ctx, stock).Int(); err != nil || n != 9 {
				t.Errorf("the copy after the run: %d, %v; want 9 loaded again", n, err)
			}
		})
	}
}

// TestSummaryNamesOnlyViolations: the run's summary, which every
// instance reads, names the items in violation only, not every item the
// run checked; each item's finding is read on its own key.
func TestSummaryNamesOnlyViolations(t *testing.T) {
	r := newCatalogueRig(t)
	rdb := r.rdb
	r.run(t)
	last, ok, err := reconcile.Last(r.ctx, rdb, r.prefix)
	if err != nil || !ok || len(last.Items) != 0 {
		t.Fatalf("summary of a clean run: %+v ok=%v err=%v; want no items", last, ok, err)
	}
	if f, ok, err := reconcile.LastFor(r.ctx, rdb, r.prefix, "product", 7); err != nil || !ok || !f.Item.Conserved {
		t.Fatalf("product 7's finding: %+v ok=%v err=%v; want conserved", f, ok, err)
	}
	// A unit gone with no order, from the database and the Redis copy
	// both (a change in the database alone is no work for the next run:
	// quiet.go).
	if err := r.db.Exec(r.ctx, "UPDATE products SET stock = stock - 1 WHERE id = 7"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Decr(r.ctx, "seckill:{"+r.ns+":7}:stock").Err(); err != nil {
		t.Fatal(err)
	}
	r.run(t)
	last, ok, err = reconcile.Last(r.ctx, rdb, r.prefix)
	if err != nil || !ok || len(last.Items) != 1 || last.Items[0].ID != 7 || last.Violations != 1 {
		t.Fatalf("summary with product 7 in violation: %+v ok=%v err=%v", last, ok, err)
	}
	if f, ok, err := reconcile.LastFor(r.ctx, rdb, r.prefix, "product", 7); err != nil || !ok || f.Item.Conserved {
		t.Fatalf("product 7's finding: %+v ok=%v err=%v; want the violation", f, ok, err)
	}
	if _, ok, err := reconcile.LastFor(r.ctx, rdb, r.prefix, "product", 8); err != nil || ok {
		t.Fatalf("product 8, never checked: ok=%v err=%v; want no finding", ok, err)
	}
}

// TestItemsBoughtWithoutACopyAreCheckedAfterTheirSale: db-atomic keeps no
// Redis copy, so only the instance's activity names its sales. Of 2,000
// products, product 42 is bought: the next run audits it, and it alone;
// the run after, with nothing bought since, audits nothing.
func TestItemsBoughtWithoutACopyAreCheckedAfterTheirSale(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	if _, err := db.Products().LoadCatalogue(ctx, 2000, 100); err != nil {
		t.Fatal(err)
	}
	act := &reconcile.Activity{}
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageDBAtomic: inventory.NewDBAtomic(db.Products())}, "x", "O").OnBuy(act.Mark)
	if _, err := svc.Buy(ctx, inventory.StageDBAtomic, inventory.Request{ItemID: 42, UserID: "a", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Name("rec") + ":"
	locker := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix + "lock:"})
	defer locker.Close()
	count := &counted{Auditor: svc}
	job := reconcile.New(locker, rdb, []reconcile.Target{{Kind: "product", Items: count, Activity: act}},
		reconcile.Options{Interval: time.Second, Instance: "x", Prefix: prefix})
	for slot, want := range [][]int64{{42}, nil} {
		count.audits = nil
		if _, ran, err := job.RunSlot(ctx, int64(slot+1)); err != nil || !ran {
			t.Fatalf("run %d: ran=%v err=%v", slot+1, ran, err)
		}
		if !slices.Equal(count.audits, want) {
			t.Errorf("run %d audited %d items (%v); want %v", slot+1, len(count.audits), count.audits[:min(5, len(count.audits))], want)
		}
	}
	if f, ok, err := reconcile.LastFor(ctx, rdb, prefix, "product", 42); err != nil || !ok || !f.Item.Conserved {
		t.Errorf("product 42's finding: %+v ok=%v err=%v; want conserved", f, ok, err)
	}
}
