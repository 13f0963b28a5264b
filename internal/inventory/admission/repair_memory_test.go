package admission_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
)

// TestARepairThatTakesUnitsAwayKeepsTheSellOut: a reset loads every
// stage's Redis copy; then one stage sells the item out, and the copies of
// the stages that did not sell still hold the reset's stock. The reconcile
// job lowers them to the database's. That takes units away: it cannot make
// the item buyable, so it must not tell the fleet units came back. It
// did, and the fleet's instances all forgot that the item was sold out,
// the stage's memory included: under wrk, a db-atomic sale after a
// redis-sharded one had its post-sale wave rush the database's line again
// at each reconcile run (every 10 s), and up to a quarter of the answers
// were 503 overloaded. A repair that puts units back (a reservation given
// back, a copy raised or loaded) still tells the fleet.
func TestARepairThatTakesUnitsAwayKeepsTheSellOut(t *testing.T) {
	ctx, db, rdb, ns := redisCopies(t, "rm-")
	const id = 1
	if err := db.Products().Reset(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	epochs := &memEpochs{}
	var mu sync.Mutex
	var reasons []string
	crowd := admission.NewCrowd(admission.CrowdOptions{Epochs: epochs, Kind: ns, Refused: func(r string) {
		mu.Lock()
		defer mu.Unlock()
		reasons = append(reasons, r)
	}})
	atomic := redisstage.NewRedisAtomic(rdb, db.Products(), ns, nil)
	sharded := redisstage.NewRedisSharded(rdb, db.Products(), ns+"s", 4, nil)
	atomic.OnRestock(crowd.Restocked) // as the composition root wires them
	sharded.OnRestock(crowd.Restocked)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{
		inventory.StageDBAtomic:     crowd.Wrap(inventory.NewDBAtomic(db.Products())),
		inventory.StageRedisAtomic:  crowd.Wrap(atomic),
		inventory.StageRedisSharded: crowd.Wrap(sharded),
	}, "a", "O").WithCrowd(crowd)
	if err := svc.Reset(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	buy := func(user string) error {
		_, err := svc.Buy(ctx, inventory.StageDBAtomic, inventory.Request{ItemID: id, UserID: user, Quantity: 1})
		return err
	}
	for _, u := range []string{"u1", "u2"} {
		if err := buy(u); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
	}
	if err := buy("late-1"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("late-1: %v, want sold out", err)
	}
	bumps := func() int {
		epochs.mu.Lock()
		defer epochs.mu.Unlock()
		return epochs.n[ns+":"+strconv.Itoa(id)]
	}
	before := bumps()

	// The reconcile job: both copies hold 2, the database 0.
	for name, repair := range map[string]func(context.Context, int64, time.Duration, func(context.Context, string) (bool, error)) (redisstage.Drift, error){
		"redis-atomic": atomic.Repair, "redis-sharded": sharded.Repair,
	} {
		d, err := repair(ctx, id, time.Minute, db.Products().OrderExists)
		if err != nil || !d.Repaired || d.RedisStock != 2 || d.DBStock != 0 {
			t.Fatalf("%s repair: %+v, %v; want its copy lowered from 2 to 0", name, d, err)
		}
	}
	if n := bumps() - before; n != 0 {
		t.Errorf("%d epoch bumps for copies lowered to the database's stock, want none: no unit came back", n)
	}
	if err := buy("late-2"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("late-2: %v, want sold out", err)
	}
	want := []string{admission.RefusedSoldOut, admission.RefusedRemembered}
	if !slices.Equal(reasons, want) {
		t.Errorf("refusals %v, want %v: the buyer after the repairs still answered from memory", reasons, want)
	}

	// A stale reservation whose order was written is confirmed: nothing
	// comes back. One whose order never was is given back: news.
	pending := "seckill:{" + ns + ":" + strconv.Itoa(id) + "}:pending"
	written := func(context.Context, string) (bool, error) { return true, nil }
	never := func(context.Context, string) (bool, error) { return false, nil }
	for _, step := range []struct {
		no     string
		exists func(context.Context, string) (bool, error)
		bumps  int
	}{{"O-written", written, 0}, {"O-never", never, 1}} {
		if err := rdb.HSet(ctx, pending, step.no, "1|1000|"+step.no).Err(); err != nil {
			t.Fatal(err)
		}
		before = bumps()
		if d, err := atomic.Repair(ctx, id, time.Minute, step.exists); err != nil || d.Resolved != 1 {
			t.Fatalf("%s: repair %+v, %v; want its reservation settled", step.no, d, err)
		}
		if n := bumps() - before; n != step.bumps {
			t.Errorf("%s: %d epoch bumps, want %d", step.no, n, step.bumps)
		}
	}

	// A unit back in the database: the repair raises the copies, and
	// that is news for the fleet.
	if err := db.Products().Reset(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	before = bumps()
	for name, repair := range map[string]func(context.Context, int64, time.Duration, func(context.Context, string) (bool, error)) (redisstage.Drift, error){
		"redis-atomic": atomic.Repair, "redis-sharded": sharded.Repair,
	} {
		if d, err := repair(ctx, id, time.Minute, db.Products().OrderExists); err != nil || !d.Repaired || d.DBStock != 1 {
			t.Fatalf("%s repair: %+v, %v; want its copy raised to 1", name, d, err)
		}
	}
	if n := bumps() - before; n != 2 {
		t.Errorf("%d epoch bumps for two copies raised, want 2", n)
	}
}
