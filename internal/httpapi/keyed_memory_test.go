package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestKeyedRefusalOfASaleClosingFarAheadIsSoldOut: a sale may close far
// ahead (closes_at 9999-12-31, a "never" some admins write). A keyed late
// buyer is refused in the claim's script, which says the time left until
// the closing ('sold-out:<ms>'); that many milliseconds are past what Lua
// writes as a plain integer (1e14: it writes 2.5e+14), and the buyer must
// still hear the stage's 409 sold-out, as a keyless one does, not 503.
// Both scripts are tried: the fold (fold.lua) and the plain check
// (refuse.lua, when a rate limit keeps the crowd from folding).
func TestKeyedRefusalOfASaleClosingFarAheadIsSoldOut(t *testing.T) {
	for _, c := range []struct {
		stage string
		fold  bool
	}{{"redis-atomic", true}, {"redis-atomic", false}, {"redis-stream", true}, {"redis-stream", false}} {
		t.Run(c.stage+"/fold="+strconv.FormatBool(c.fold), func(t *testing.T) {
			rdb := testenv.Redis(t)
			db := testenv.SQLite(t)
			ctx := context.Background()
			prefix := testenv.Name("far")
			stock := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
			var stage inventory.Stage = stock
			if c.stage == "redis-stream" {
				stage = redisstage.NewRedisStream(stock, redisstage.StreamOptions{})
			}
			co := admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{}}
			if !c.fold {
				co.Admit = func(context.Context, inventory.Order) error { return nil }
			}
			crowd := admission.NewCrowd(co)
			svc := inventory.NewService(db.Products(), map[string]inventory.Stage{c.stage: crowd.Wrap(stage)}, "far-1", "O").WithCrowd(crowd)
			never := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
			if err := svc.ResetSale(ctx, 1, 0, inventory.SaleWindow{ClosesAt: never}); err != nil {
				t.Fatal(err)
			}
			h := httpapi.NewServer(httpapi.Deps{
				Instance:    "far-1",
				Products:    svc,
				Stage:       c.stage,
				Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
			})
			if rec := post(h, "far-key", `{"user_id":"late"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
				t.Fatalf("a keyed late buyer of a sale that closes in 9999: %d %s; want 409 sold-out", rec.Code, rec.Body)
			}
		})
	}
}

// stepEpochs is a fleet's epochs in memory: a bump changes the item's
// epoch, as a restock does on redisEpochs.
type stepEpochs struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *stepEpochs) Epoch(_ context.Context, item string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strconv.Itoa(e.n[item]), nil
}

func (e *stepEpochs) Bump(_ context.Context, item string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[item]++
	return nil
}

// afterCommand runs then, once, when the next command of one of names
// has run in Redis and before its reply reaches the caller. An EVALSHA
// answered NOSCRIPT does not count (go-redis sends it again as EVAL).
type afterCommand struct {
	mu    sync.Mutex
	names []string
	then  func()
}

func (h *afterCommand) arm(f func(), names ...string) {
	h.mu.Lock()
	h.names, h.then = names, f
	h.mu.Unlock()
}

func (h *afterCommand) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *afterCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return err
		}
		h.mu.Lock()
		var f func()
		if slices.Contains(h.names, cmd.Name()) {
			f, h.then, h.names = h.then, nil, nil
		}
		h.mu.Unlock()
		if f != nil {
			f()
		}
		return err
	}
}

func (h *afterCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestKeyedMemoryAnswerFollowsAResetDuringTheKeyRead: a keyed buyer of an
// item this instance remembers sold out waits for the read of its key
// (EXISTS), a round trip; a reset (two units) comes and returns in the
// meantime. The buyer is answered after the reset returned, and must buy:
// the reset dropped the memory, and the stock is there. (It heard 409
// sold-out from what memory said before its round trip; the claim's
// script it replaced would have read the new stock.)
func TestKeyedMemoryAnswerFollowsAResetDuringTheKeyRead(t *testing.T) {
	rdb := testenv.Redis(t)
	held := &afterCommand{}
	rdb.AddHook(held)
	db := testenv.SQLite(t)
	ctx := context.Background()
	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: &stepEpochs{}})
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": crowd.Wrap(inventory.NewDBAtomic(db.Products()))}, "mid-read", "O").WithCrowd(crowd)
	if err := svc.Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	h := httpapi.NewServer(httpapi.Deps{
		Instance:    "mid-read",
		Products:    svc,
		Stage:       "db-atomic",
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("midread") + ":idem:", Lease: time.Hour}),
	})
	if rec := post(h, "k-first", `{"user_id":"first"}`); rec.Code != 201 {
		t.Fatalf("the last unit: %d %s", rec.Code, rec.Body)
	}
	if rec := post(h, "k-second", `{"user_id":"second"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
		t.Fatalf("after the last unit: %d %s; want 409 sold-out", rec.Code, rec.Body)
	}
	var resetErr error
	held.arm(func() { resetErr = svc.Reset(ctx, 1, 2) }, "exists")
	rec := post(h, "k-late", `{"user_id":"late"}`)
	if resetErr != nil {
		t.Fatal(resetErr)
	}
	if rec.Code != 201 {
		t.Fatalf("a keyed buyer answered after a reset that came during its key's read: %d %s; want 201", rec.Code, rec.Body)
	}
}

// downEpochs is an epoch store that cannot be read: nothing is remembered.
type downEpochs struct{}

func (downEpochs) Epoch(context.Context, string) (string, error) {
	return "", errors.New("epoch store unreachable")
}
func (downEpochs) Bump(context.Context, string) error { return errors.New("epoch store unreachable") }

// TestKeyedRefusalIsCountedWithoutAnEpoch: with no epoch to remember a
// sell-out under (the epoch store unreachable), a keyless buyer refused
// by the stage is still counted sold_out_stage; so must a keyed one
// refused by the claim's check, the stage's own answer: the metrics count
// refusals whether or not memory can learn from them.
func TestKeyedRefusalIsCountedWithoutAnEpoch(t *testing.T) {
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	ctx := context.Background()
	prefix := testenv.Name("noepoch")
	stock := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
	var mu sync.Mutex
	var reasons []string
	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: downEpochs{},
		Refused: func(r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }})
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": crowd.Wrap(stock)}, "noepoch-1", "O")
	if err := db.Products().Reset(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := stock.Reset(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	h := httpapi.NewServer(httpapi.Deps{
		Instance:    "noepoch-1",
		Products:    svc,
		Stage:       "redis-atomic",
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
	})
	for _, key := range []string{"", "k-late"} {
		if rec := post(h, key, `{"user_id":"late-`+key+`"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
			t.Fatalf("a late buyer with key %q: %d %s; want 409 sold-out", key, rec.Code, rec.Body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(reasons) != "[sold_out_stage sold_out_stage]" {
		t.Fatalf("refusals counted %v; want [sold_out_stage sold_out_stage], the keyless buyer's and the keyed one's", reasons)
	}
}

// TestKeylessBuyRefusedForItsMissingKeyIsNotCountedSoldOut: where keys
// are required, a keyless buyer of an item remembered sold out hears 400
// idempotency-key-required; it was not refused as sold out, and must not
// be counted so (it was, as sold_out_remembered, when memory was read).
func TestKeylessBuyRefusedForItsMissingKeyIsNotCountedSoldOut(t *testing.T) {
	db := testenv.SQLite(t)
	var runs atomic.Int32
	var mu sync.Mutex
	var reasons []string
	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{},
		Refused: func(r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }})
	h := httpapi.NewServer(httpapi.Deps{
		Instance:              "required-1",
		Products:              inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": crowd.Wrap(soldOutStage{&runs})}, "required-1", "O"),
		Stage:                 "db-atomic",
		Idempotency:           idempotency.New(testenv.Redis(t), idempotency.Options{Prefix: testenv.Name("required") + ":idem:"}),
		RequireIdempotencyKey: true,
	})
	if rec := post(h, "k-first", `{"user_id":"first"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
		t.Fatalf("the stage's sell-out: %d %s", rec.Code, rec.Body)
	}
	if rec := post(h, "", `{"user_id":"keyless"}`); rec.Code != 400 || problemType(t, rec) != "idempotency-key-required" {
		t.Fatalf("a keyless buyer where keys are required: %d %s; want 400", rec.Code, rec.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(reasons) != "[sold_out_stage]" {
		t.Fatalf("refusals counted %v; want [sold_out_stage], the stage's alone", reasons)
	}
}
