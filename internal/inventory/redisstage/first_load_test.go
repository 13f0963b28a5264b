package redisstage_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// heldGets is a ledger that counts its Gets (a load's read of the item)
// and holds each until released.
type heldGets struct {
	*store.Ledger
	gets    atomic.Int64
	release chan struct{}
}

func (h *heldGets) Get(ctx context.Context, id int64) (inventory.Item, error) {
	h.gets.Add(1)
	select {
	case <-h.release:
	case <-ctx.Done():
		return inventory.Item{}, ctx.Err()
	}
	return h.Ledger.Get(ctx, id)
}

// shaOf is a script's SHA1, as EVALSHA names it.
func shaOf(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// scriptCounter counts the runs of one script that Redis answered.
type scriptCounter struct {
	sha string
	n   *atomic.Int64
}

func (h scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		// Concurrent buyers' scripts go in one pipeline (reserve_batch.go).
		for _, c := range cmds {
			h.count(c, c.Err())
		}
		return err
	}
}

func (h scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd, err)
		return err
	}
}

// count counts cmd if it is a run of the script that Redis answered.
func (h scriptCounter) count(cmd redis.Cmder, err error) {
	// go-redis sends EVALSHA, and EVAL after a NOSCRIPT (a server that
	// has not seen the script yet): both are the script's run.
	if a := cmd.Args(); len(a) > 1 && err == nil {
		if src, ok := a[1].(string); ok && (a[0] == "evalsha" && src == h.sha || a[0] == "eval" && shaOf(src) == h.sha) {
			h.n.Add(1)
		}
	}
}

// TestFirstBuyersOfAnUnloadedItemLoadItOnce: nothing is copied into Redis
// at start, so the first buyers of an item find no copy. Eight of them
// at once, four on each of two services (instances, each with its own
// Redis client), all find it missing before any load has read the
// database: the database read that holds them is released only once
// Redis has answered all eight "not loaded". They load the copy once,
// not once each, and all eight buy.
func TestFirstBuyersOfAnUnloadedItemLoadItOnce(t *testing.T) {
	take, _ := redisstage.ShardedScriptsForTest()
	reserve, err := redisstage.ReserveScriptForTest(context.Background(), testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []struct {
		name  string
		sha   string
		stage func(rdb redis.UniversalClient, book *heldGets, ns string) inventory.Stage
	}{
		{inventory.StageRedisAtomic, reserve, func(rdb redis.UniversalClient, book *heldGets, ns string) inventory.Stage {
			return redisstage.NewRedisAtomic(rdb, book, ns, nil)
		}},
		{inventory.StageRedisSharded, take, func(rdb redis.UniversalClient, book *heldGets, ns string) inventory.Stage {
			return redisstage.NewRedisSharded(rdb, book, ns, 4, nil)
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			streamtest.OnEveryBackend(t, 40, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
				book := &heldGets{Ledger: e.DB.Products(), release: make(chan struct{})}
				var notLoaded atomic.Int64
				var stages []inventory.Stage
				for range 2 {
					rdb := redis.NewClient(e.RDB.Options())
					t.Cleanup(func() { _ = rdb.Close() })
					rdb.AddHook(scriptCounter{sc.sha, &notLoaded})
					stages = append(stages, sc.stage(rdb, book, e.NS))
				}
				const buyers = 8
				start := make(chan struct{})
				errs := make([]error, buyers)
				var wg sync.WaitGroup
				for i := range buyers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						errs[i] = stages[i%2].Buy(ctx, inventory.Order{No: fmt.Sprintf("O-first-%d", i), ItemID: e.ID,
							UserID: fmt.Sprintf("u%d", i), Quantity: 1, Stage: sc.name, Instance: "a", CreatedAt: time.Now()})
					}()
				}
				close(start)
				testkit.Eventually(t, "every buyer found the copy missing", time.Minute, func() bool { return notLoaded.Load() >= buyers })
				close(book.release)
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						t.Errorf("buyer %d: %v", i, err)
					}
				}
				if n := book.gets.Load(); n != 1 {
					t.Errorf("%d first buyers on two services read the item %d times to load its copy; want once", buyers, n)
				}
				a, err := e.DB.Products().Audit(ctx, e.ID)
				if err != nil || a.Stock != 40-buyers || !a.Conserved() {
					t.Errorf("audit %+v, %v; want %d left, conserved", a, err, 40-buyers)
				}
			})
		})
	}
}

// readThenHold is a ledger whose next Get, once armed, reads the database
// and then waits to be released before it returns what it read: a first
// load's read, overtaken by whatever happens meanwhile.
type readThenHold struct {
	*store.Ledger
	armed   atomic.Bool
	read    chan struct{} // closed once the armed Get has read
	release chan struct{}
}

func (h *readThenHold) Get(ctx context.Context, id int64) (inventory.Item, error) {
	it, err := h.Ledger.Get(ctx, id)
	if h.armed.CompareAndSwap(true, false) {
		close(h.read)
		<-h.release
	}
	return it, err
}

// TestFirstLoadOvertakenByAResetKeepsTheResetsCopy: a first buyer's load
// reads the item (40 units); before it writes the copy, an admin resets
// the item to 30 on another instance, which loads its own copy. The
// first load must not write its 40 over the reset's copy: the buyer buys
// from the reset's 30, and the copy ends equal to the database.
func TestFirstLoadOvertakenByAResetKeepsTheResetsCopy(t *testing.T) {
	streamtest.OnEveryBackend(t, 40, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		book := &readThenHold{Ledger: e.DB.Products(), read: make(chan struct{}), release: make(chan struct{})}
		book.armed.Store(true)
		first := redisstage.NewRedisAtomic(e.RDB, book, e.NS, nil)
		other := inventory.NewService(e.DB.Products(), map[string]inventory.Stage{
			inventory.StageRedisAtomic: redisstage.NewRedisAtomic(e.RDB, e.DB.Products(), e.NS, nil)}, "b", "O")
		done := make(chan error, 1)
		go func() {
			done <- first.Buy(ctx, inventory.Order{No: "O-first", ItemID: e.ID, UserID: "u", Quantity: 1, Stage: inventory.StageRedisAtomic, Instance: "a", CreatedAt: time.Now()})
		}()
		<-book.read
		if err := other.ResetSale(ctx, e.ID, 30, inventory.SaleWindow{}); err != nil {
			t.Fatal(err)
		}
		close(book.release)
		if err := <-done; err != nil {
			t.Fatalf("the first buy: %v", err)
		}
		if n := e.RedisStock(t); n != 29 {
			t.Errorf("the copy holds %d after the reset to 30 and one buy; want 29 (the first load wrote its stale read over the reset's copy?)", n)
		}
		if a, err := e.DB.Products().Audit(ctx, e.ID); err != nil || a.Stock != 29 {
			t.Errorf("audit %+v, %v; want 29 left", a, err)
		}
	})
}

// TestFirstBuyAfterALostCopyAnnouncesARestock: an item's copy was loaded
// (registered), then Redis lost it. The next buy loads it again, and
// announces a restock, so that no instance keeps answering "sold out"
// from a memory of the copy before; the first load of an item never
// loaded announces nothing.
func TestFirstBuyAfterALostCopyAnnouncesARestock(t *testing.T) {
	streamtest.OnEveryBackend(t, 40, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		var restocks atomic.Int64
		ra := redisstage.NewRedisAtomic(e.RDB, e.DB.Products(), e.NS, nil)
		ra.OnRestock(func(context.Context, int64) error { restocks.Add(1); return nil })
		buy := func(user string) {
			t.Helper()
			if err := ra.Buy(ctx, inventory.Order{No: "O-" + user, ItemID: e.ID, UserID: user, Quantity: 1, Stage: inventory.StageRedisAtomic, Instance: "a", CreatedAt: time.Now()}); err != nil {
				t.Fatalf("buy of %s: %v", user, err)
			}
		}
		buy("u1")
		if n := restocks.Load(); n != 0 {
			t.Fatalf("the first load of an item never loaded announced %d restocks; want none", n)
		}
		if err := e.RDB.Del(ctx, e.Key("stock")).Err(); err != nil {
			t.Fatal(err)
		}
		buy("u2")
		if n := restocks.Load(); n != 1 {
			t.Errorf("a copy loaded again after Redis lost it announced %d restocks; want 1", n)
		}
		if n := e.RedisStock(t); n != 38 {
			t.Errorf("the reloaded copy holds %d; want 38", n)
		}
	})
}

// TestFirstLoaderWhoLeavesDoesNotFailTheOthers: the buyers of one item on
// one instance share its first load. The buyer whose call started it hangs
// up while the load reads the database; the buyer who joined it is still
// there, and gets its unit once the read is released, rather than the
// first buyer's cancellation.
func TestFirstLoaderWhoLeavesDoesNotFailTheOthers(t *testing.T) {
	reserve, err := redisstage.ReserveScriptForTest(context.Background(), testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	streamtest.OnEveryBackend(t, 40, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		book := &heldGets{Ledger: e.DB.Products(), release: make(chan struct{})}
		var notLoaded atomic.Int64
		rdb := redis.NewClient(e.RDB.Options())
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(scriptCounter{reserve, &notLoaded})
		stage := redisstage.NewRedisAtomic(rdb, book, e.NS, nil)
		buy := func(ctx context.Context, who string) error {
			return stage.Buy(ctx, inventory.Order{No: "O-" + who, ItemID: e.ID, UserID: who, Quantity: 1,
				Stage: inventory.StageRedisAtomic, Instance: "a", CreatedAt: time.Now()})
		}
		firstCtx, hangUp := context.WithCancel(ctx)
		first := make(chan error, 1)
		go func() { first <- buy(firstCtx, "first") }()
		testkit.Eventually(t, "the first buyer's load reads the item", time.Minute, func() bool { return book.gets.Load() == 1 })
		second := make(chan error, 1)
		go func() { second <- buy(ctx, "second") }()
		testkit.Eventually(t, "the second buyer found the copy missing too", time.Minute, func() bool { return notLoaded.Load() >= 2 })
		hangUp()
		if err := <-first; err == nil {
			t.Error("the buyer who hung up was sold a unit")
		}
		close(book.release)
		if err := <-second; err != nil {
			t.Errorf("the buyer still waiting for the shared load: %v; want the unit", err)
		}
		if n := book.gets.Load(); n != 1 {
			t.Errorf("the item was read %d times to load its copy; want once", n)
		}
		a, err := e.DB.Products().Audit(ctx, e.ID)
		if err != nil || a.Stock != 39 || !a.Conserved() {
			t.Errorf("audit %+v, %v; want 39 left (the second buyer's unit), conserved", a, err)
		}
	})
}

// cmdHook runs a function after each command a client sent, with the
// command's error: a test's hand on the wire.
type cmdHook func(cmd redis.Cmder, err error)

func (h cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h(cmd, err)
		return err
	}
}

// TestShardedWaiterForAnotherLoaderFindsEveryBucket: the four buckets of
// an item nobody bought (one unit each) are loaded one by one. Instance
// A's first buyer takes the load and is held before bucket 0 is in;
// instance B's buyer, whose home is bucket 0, finds the item unloaded and
// waits for A's load. A loads bucket 0 and is held again; B's buyer sees
// bucket 0 arrive and is held there while instance C's buyer takes bucket
// 0's unit. B's buyer then goes on while A's buckets 1 to 3 are still to
// come: it must wait for them and buy there, not be told that the item
// does not exist.
func TestShardedWaiterForAnotherLoaderFindsEveryBucket(t *testing.T) {
	streamtest.OnEveryBackend(t, 4, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		client := func(h cmdHook) *redis.Client {
			rdb := redis.NewClient(e.RDB.Options())
			t.Cleanup(func() { _ = rdb.Close() })
			if h != nil {
				rdb.AddHook(h)
			}
			return rdb
		}
		stage := func(rdb *redis.Client) *redisstage.RedisSharded {
			return redisstage.NewRedisSharded(rdb, e.DB.Products(), e.NS, 4, nil)
		}
		bucket0 := fmt.Sprintf("seckill:{%s:%d:b0}:stock", e.NS, e.ID)
		var (
			splitOnce, load0Once, saw0Once sync.Once
			aSplit, loadBucket0, aLoaded0  = make(chan struct{}), make(chan struct{}), make(chan struct{})
			restA, bSaw0, goB              = make(chan struct{}), make(chan struct{}), make(chan struct{})
			bMissing, bMissingAfter        atomic.Int64
			released                       atomic.Bool
		)
		a := stage(client(func(cmd redis.Cmder, err error) {
			args := cmd.Args()
			switch {
			case len(args) > 1 && args[0] == "set" && args[1] == bucket0+":split": // the split, before any bucket
				splitOnce.Do(func() { close(aSplit); <-loadBucket0 })
			case len(args) > 3 && (args[0] == "evalsha" || args[0] == "eval") && err == nil && fmt.Sprint(args[2]) == "5" && args[3] == bucket0: // bucket 0's load, run (an EVALSHA, or an EVAL after a NOSCRIPT)
				load0Once.Do(func() { close(aLoaded0); <-restA })
			}
		}))
		b := stage(client(func(cmd redis.Cmder, _ error) { // B's looks for the buckets
			args := cmd.Args()
			if len(args) != 2 || args[0] != "exists" {
				return
			}
			if n, _ := cmd.(*redis.IntCmd).Result(); n == 0 {
				bMissing.Add(1)
				if released.Load() {
					bMissingAfter.Add(1)
				}
			} else if args[1] == bucket0 {
				saw0Once.Do(func() { close(bSaw0); <-goB })
			}
		}))
		c := stage(client(nil))
		homed := func(bucket int, tag string) string {
			for i := 0; ; i++ {
				if u := fmt.Sprintf("%s%d", tag, i); a.Home(u) == bucket {
					return u
				}
			}
		}
		buy := func(s *redisstage.RedisSharded, user string) error {
			return s.Buy(ctx, inventory.Order{No: "O-" + user, ItemID: e.ID, UserID: user, Quantity: 1,
				Stage: inventory.StageRedisSharded, Instance: "x", CreatedAt: time.Now()})
		}
		closed := func(ch chan struct{}) func() bool {
			return func() bool {
				select {
				case <-ch:
					return true
				default:
					return false
				}
			}
		}
		aErr, bErr := make(chan error, 1), make(chan error, 1)
		go func() { aErr <- buy(a, homed(3, "a")) }()
		testkit.Eventually(t, "A's load under way, no bucket in yet", time.Minute, closed(aSplit))
		go func() { bErr <- buy(b, homed(0, "b")) }()
		testkit.Eventually(t, "B's buyer waiting for A's load", time.Minute, func() bool { return bMissing.Load() > 0 })
		close(loadBucket0)
		testkit.Eventually(t, "A's bucket 0 in", time.Minute, closed(aLoaded0))
		testkit.Eventually(t, "B's buyer sees bucket 0", time.Minute, closed(bSaw0))
		if err := buy(c, homed(0, "c")); err != nil {
			t.Fatalf("C's buyer of bucket 0's unit: %v", err)
		}
		released.Store(true)
		close(goB)
		// A's buckets 1 to 3 come only once B's buyer has answered, or
		// waits for them (it looked for one and found it missing).
		testkit.Eventually(t, "B's buyer answered or waiting", time.Minute, func() bool { return len(bErr) > 0 || bMissingAfter.Load() > 0 })
		close(restA)
		if err := <-bErr; err != nil {
			t.Errorf("B's buyer, who waited for A's load: %v; want a unit from a later bucket", err)
		}
		if err := <-aErr; err != nil {
			t.Errorf("A's buyer: %v", err)
		}
		au, err := e.DB.Products().Audit(ctx, e.ID)
		if err != nil || au.Sold != 3 || !au.Conserved() {
			t.Errorf("audit %+v, %v; want 3 sold, conserved", au, err)
		}
	})
}
