package admission_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// flakyEpochs is the fleet's epoch store, in memory, whose next Bump fails
// when failNext is set (a Redis timeout on the SET).
type flakyEpochs struct {
	mu       sync.Mutex
	n        map[string]int
	failNext bool
}

func (e *flakyEpochs) Epoch(_ context.Context, item string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strconv.Itoa(e.n[item]), nil
}

func (e *flakyEpochs) Bump(_ context.Context, item string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failNext {
		e.failNext = false
		return errors.New("i/o timeout")
	}
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[item]++
	return nil
}

// redisCopies is a test's database, its Redis and a namespace of its own
// for the Redis copies of stock (every key under it dropped at cleanup),
// with a context that ends within a minute.
func redisCopies(t *testing.T, prefix string) (context.Context, *store.DB, *redis.Client, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db := testenv.SQLite(t)
	rdb := testenv.Redis(t)
	ns := testenv.Name(prefix)
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), "seckill:{"+ns+"*").Result()
		if len(keys) > 0 {
			_ = rdb.Del(context.Background(), keys...).Err()
		}
	})
	return ctx, db, rdb, ns
}

// TestRepairedUnitsSellAfterAFailedBump: redis-atomic now remembers
// sell-outs. The reconcile job's Repair puts units back into the Redis
// copy (here: the database got a unit back, announced, while the copy
// had none, so instance A saw the copy empty and remembered "sold out"
// under the new epoch), then tells the fleet through Restocked. If that
// one Bump fails, Repair reports the error, and no later run bumps again
// (the copy now matches the database), so A answers the item 409 from
// memory for good while Redis holds a unit. Now B keeps the failed
// announcement and RetryRestocks (run every lease by the composition root)
// makes it.
func TestRepairedUnitsSellAfterAFailedBump(t *testing.T) {
	ctx, db, rdb, ns := redisCopies(t, "ca-")
	const id = 1
	if err := db.Products().Reset(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	epochs := &flakyEpochs{}
	raA := redisstage.NewRedisAtomic(rdb, db.Products(), ns, nil)
	raB := redisstage.NewRedisAtomic(rdb, db.Products(), ns, nil)
	crowdA := admission.NewCrowd(admission.CrowdOptions{Epochs: epochs, Kind: ns})
	crowdB := admission.NewCrowd(admission.CrowdOptions{Epochs: epochs, Kind: ns})
	raB.OnRestock(crowdB.Restocked) // as the composition root wires it
	a := inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisAtomic: crowdA.Wrap(raA)}, "a", "O").WithCrowd(crowdA)
	buyA := func(user string) error {
		_, err := a.Buy(ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: id, UserID: user, Quantity: 1})
		return err
	}

	if err := buyA("winner"); err != nil {
		t.Fatalf("the one unit: %v", err)
	}
	// The sale is answered before its confirm is sent: a repair that saw
	// it still reserved would find the copy busy and leave it.
	if err := raA.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	// A unit comes back to the database only (a cancelled order of a
	// database stage, or an operator), and the fleet is told of it.
	if err := db.Products().Reset(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if err := crowdB.Restocked(ctx, id); err != nil {
		t.Fatal(err)
	}
	// A buyer on A reads the new epoch; the copy is empty and nothing is
	// reserved: sold out "for good", remembered.
	if err := buyA("loser"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("loser: %v, want sold out from the copy", err)
	}
	// The reconcile job repairs the copy; its Bump fails once.
	epochs.mu.Lock()
	epochs.failNext = true
	epochs.mu.Unlock()
	d, err := raB.Repair(ctx, id, time.Minute, db.Products().OrderExists)
	if !d.Repaired {
		t.Fatalf("repair: %+v, %v; want the copy repaired to the database's unit", d, err)
	}
	if !errors.Is(err, inventory.ErrUnavailable) {
		t.Fatalf("the repair's failed announcement: %v, want ErrUnavailable", err)
	}
	// The next runs find nothing to repair.
	for range 3 {
		if d, err := raB.Repair(ctx, id, time.Minute, db.Products().OrderExists); err != nil || d.Repaired {
			t.Fatalf("later repair: %+v, %v", d, err)
		}
	}
	left, err := rdb.Get(ctx, "seckill:{"+ns+":"+strconv.Itoa(id)+"}:stock").Int()
	if err != nil || left != 1 {
		t.Fatalf("Redis copy: %d, %v; want 1 unit", left, err)
	}
	// What the composition root does every lease: B tells the fleet again.
	if err := crowdB.RetryRestocks(ctx); err != nil {
		t.Fatalf("retrying the failed announcement: %v", err)
	}
	if err := buyA("late"); err != nil {
		t.Fatalf("the copy holds 1 unit and the database 1, yet A answers %v: the one Bump that would have dropped A's "+
			"remembered sell-out failed, and nothing ever retries it", err)
	}
}
