package httpapi_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestKeyedRefusalAcrossAResetIsNotTrusted: the claim's script refuses a
// keyed buyer of a sold-out item, and a reset (two units) lands after the
// script and before its refusal is learnt. What is learnt is under the
// epoch read before the script, so it is not trusted: the next keyed buyer
// (and a keyless one) buys.
func TestKeyedRefusalAcrossAResetIsNotTrusted(t *testing.T) {
	for _, name := range []string{"redis-atomic", "redis-stream"} {
		t.Run(name, func(t *testing.T) {
			rdb := testenv.Redis(t)
			held := &afterCommand{}
			rdb.AddHook(held)
			db := testenv.SQLite(t)
			ctx := context.Background()
			prefix := testenv.Name("midreset")
			stock := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
			var stage inventory.Stage = stock
			if name == "redis-stream" {
				stage = redisstage.NewRedisStream(stock, redisstage.StreamOptions{})
			}
			crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: &stepEpochs{}})
			svc := inventory.NewService(db.Products(), map[string]inventory.Stage{name: crowd.Wrap(stage)}, "mid-1", "O").WithCrowd(crowd)
			if err := svc.Reset(ctx, 1, 0); err != nil {
				t.Fatal(err)
			}
			h := httpapi.NewServer(httpapi.Deps{
				Instance:    "mid-1",
				Products:    svc,
				Stage:       name,
				Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
			})
			var resetErr error
			held.arm(func() { resetErr = svc.Reset(ctx, 1, 2) }, "evalsha", "eval")
			if rec := post(h, "k-late", `{"user_id":"late"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
				t.Fatalf("the keyed buyer refused before the reset: %d %s; want 409 sold-out", rec.Code, rec.Body)
			}
			if resetErr != nil {
				t.Fatal(resetErr)
			}
			if rec := post(h, "k-next", `{"user_id":"next"}`); rec.Code != 201 && rec.Code != 202 {
				t.Fatalf("a keyed buyer after the reset: %d %s; want a unit", rec.Code, rec.Body)
			}
			if rec := post(h, "", `{"user_id":"keyless"}`); rec.Code != 201 && rec.Code != 202 {
				t.Fatalf("a keyless buyer after the reset: %d %s; want a unit", rec.Code, rec.Body)
			}
		})
	}
}

// heldStage holds its first buy until release is closed, then sells it;
// every later buy is sold out.
type heldStage struct {
	entered, release chan struct{}
	calls            atomic.Int32
}

func (s *heldStage) Buy(context.Context, inventory.Order) error {
	if s.calls.Add(1) == 1 {
		close(s.entered)
		<-s.release
		return nil
	}
	return inventory.ErrSoldOut
}

// TestKeyedMemoryWhileTheKeysFirstBuyIsInFlight: the first buy with a key
// is inside the stage when the instance learns the item is sold out. A
// duplicate with the key hears 409 in-flight, the key with another body
// 422 mismatch (not "sold out"), a key of another user sold out from
// memory; once the first finishes, its key replays its 201. Only the
// other user's answer is counted, as remembered.
func TestKeyedMemoryWhileTheKeysFirstBuyIsInFlight(t *testing.T) {
	for _, coupon := range []bool{false, true} {
		t.Run("coupon="+strconv.FormatBool(coupon), func(t *testing.T) {
			rdb := testenv.Redis(t)
			db := testenv.SQLite(t)
			stage := &heldStage{entered: make(chan struct{}), release: make(chan struct{})}
			var mu sync.Mutex
			var reasons []string
			crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: &stepEpochs{},
				Refused: func(r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }})
			svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": crowd.Wrap(stage)}, "inflight-1", "O")
			deps := httpapi.Deps{Instance: "inflight-1", Stage: "db-atomic",
				Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("inflight") + ":idem:", Lease: time.Hour})}
			path, body, other := "/api/v1/products/1/buy", `{"user_id":"first","quantity":1}`, `{"user_id":"first","quantity":2}`
			if coupon {
				svc = inventory.NewService(db.Coupons(), map[string]inventory.Stage{"db-atomic": crowd.Wrap(stage)}, "inflight-1", "O")
				deps.Coupons, deps.Products = svc, inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": inventory.NewDBAtomic(db.Products())}, "inflight-1", "O")
				path, body, other = "/api/v1/coupons/1/grab", `{"user_id":"first"}`, `{"user_id":"first" }`
			} else {
				deps.Products = svc
			}
			h := httpapi.NewServer(deps)
			send := func(key, body string) *httptest.ResponseRecorder {
				req := httptest.NewRequest("POST", path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			done := make(chan *httptest.ResponseRecorder)
			go func() { done <- send("k-first", body) }()
			<-stage.entered
			if rec := send("", `{"user_id":"second"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
				t.Fatalf("a keyless buyer while the first is inside: %d %s; want the stage's sold-out", rec.Code, rec.Body)
			}
			if rec := send("k-first", body); rec.Code != 409 || problemType(t, rec) != "idempotency-in-flight" {
				t.Errorf("the first key's duplicate: %d %s; want 409 in-flight", rec.Code, rec.Body)
			}
			if rec := send("k-first", other); rec.Code != 422 || problemType(t, rec) != "idempotency-mismatch" {
				t.Errorf("the first key with another body: %d %s; want 422 mismatch", rec.Code, rec.Body)
			}
			if rec := send("k-first", `{"user_id":"third"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
				t.Errorf("the first key, another user: %d %s; want 409 sold-out", rec.Code, rec.Body)
			}
			close(stage.release)
			if rec := <-done; rec.Code != 201 {
				t.Fatalf("the first buy: %d %s; want 201", rec.Code, rec.Body)
			}
			if rec := send("k-first", body); rec.Code != 201 || rec.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("the first key after its buy: %d %v %s; want its 201 replayed", rec.Code, rec.Header(), rec.Body)
			}
			if rec := send("k-first", other); rec.Code != 422 {
				t.Errorf("the first key with another body, after its buy: %d %s; want 422", rec.Code, rec.Body)
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(reasons) != "[sold_out_stage sold_out_remembered]" {
				t.Errorf("refusals counted %v; want [sold_out_stage sold_out_remembered]", reasons)
			}
			if n := stage.calls.Load(); n != 2 {
				t.Errorf("the stage ran %d times; want 2", n)
			}
		})
	}
}

// TestKeyedWindowRefusalTeachesTheMemory: the claim's script refuses a
// keyed buyer before the opening ('sale-not-open:<ms>') and, after a
// reset that closed the sale, after the closing ('sale-closed'); the
// instance learns both, so the next keyed buyer costs [exists] and hears
// the same, with Retry-After before the opening. Counted window_stage,
// then window_remembered.
func TestKeyedWindowRefusalTeachesTheMemory(t *testing.T) {
	rdb := testenv.Redis(t)
	trips := &roundTrips{}
	rdb.AddHook(trips)
	db := testenv.SQLite(t)
	ctx := context.Background()
	prefix := testenv.Name("teachwin")
	stock := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
	var mu sync.Mutex
	var reasons []string
	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: &stepEpochs{},
		Refused: func(r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }})
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": crowd.Wrap(stock)}, "teachwin-1", "O").WithCrowd(crowd)
	h := httpapi.NewServer(httpapi.Deps{
		Instance:    "teachwin-1",
		Products:    svc,
		Stage:       "redis-atomic",
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
	})
	for i, c := range []struct {
		window inventory.SaleWindow
		want   string
	}{
		{inventory.SaleWindow{OpensAt: time.Now().Add(time.Hour)}, "sale-not-open"},
		{inventory.SaleWindow{OpensAt: time.Now().Add(-2 * time.Hour), ClosesAt: time.Now().Add(-time.Hour)}, "sale-closed"},
	} {
		if err := svc.ResetSale(ctx, 1, 5, c.window); err != nil {
			t.Fatal(err)
		}
		post(h, fmt.Sprintf("warm-%d", i), `{"user_id":"warm"}`) // loads the script
		crowd.Restocked(ctx, 1)                                  // and forgets what the warming taught
		mu.Lock()
		reasons = nil
		mu.Unlock()
		trips.take()
		first := post(h, fmt.Sprintf("k-%d-1", i), `{"user_id":"first"}`)
		if got := trips.take(); first.Code != 409 || problemType(t, first) != c.want || fmt.Sprint(got) != "[evalsha]" {
			t.Fatalf("%s: the first keyed buyer: %d %s, sent %v; want 409 in the claim's one script", c.want, first.Code, first.Body, got)
		}
		next := post(h, fmt.Sprintf("k-%d-2", i), `{"user_id":"next"}`)
		if got := trips.take(); next.Code != 409 || problemType(t, next) != c.want || fmt.Sprint(got) != "[exists]" {
			t.Fatalf("%s: the next keyed buyer: %d %s, sent %v; want 409 after [exists]", c.want, next.Code, next.Body, got)
		}
		if c.want == "sale-not-open" && next.Header().Get("Retry-After") == "" {
			t.Errorf("%s from memory without Retry-After", c.want)
		}
		mu.Lock()
		if fmt.Sprint(reasons) != "[window_stage window_remembered]" {
			t.Errorf("%s: refusals counted %v; want [window_stage window_remembered]", c.want, reasons)
		}
		mu.Unlock()
	}
}

// TestKeyedMemoryOnTheDemoAndWithoutAStore: with the records on a Redis
// of their own (the demo: the claim has no check), a keyed late buyer is
// answered from the memory the stage taught, after [exists] on the
// records' Redis; a key that bought replays; after a restock the refused
// key buys. Without a store, a keyed buyer of a remembered sell-out hears
// it from the stage's memory, counted once; with keys required, a keyless
// one hears 400.
func TestKeyedMemoryOnTheDemoAndWithoutAStore(t *testing.T) {
	rdb := testenv.Redis(t)
	records := testenv.Redis(t)
	trips := &roundTrips{}
	records.AddHook(trips)
	db := testenv.SQLite(t)
	ctx := context.Background()
	prefix := testenv.Name("demo")
	stock := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
	var mu sync.Mutex
	var reasons []string
	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: &stepEpochs{},
		Refused: func(r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }})
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": crowd.Wrap(stock)}, "demo-1", "O").WithCrowd(crowd)
	if err := svc.Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	h := httpapi.NewServer(httpapi.Deps{Instance: "demo-1", Products: svc, Stage: "redis-atomic",
		Idempotency: idempotency.New(records, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour})})
	if rec := post(h, "k-win", `{"user_id":"win"}`); rec.Code != 201 {
		t.Fatalf("the unit: %d %s", rec.Code, rec.Body)
	}
	// The winner's reservation is confirmed after its answer; until then
	// the stage says "sold out for now", which is not remembered.
	if err := stock.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	if rec := post(h, "k-late", `{"user_id":"late"}`); rec.Code != 409 {
		t.Fatalf("the stage's sell-out: %d %s", rec.Code, rec.Body)
	}
	trips.take()
	if rec := post(h, "k-later", `{"user_id":"later"}`); rec.Code != 409 || fmt.Sprint(trips.take()) != "[exists]" {
		t.Fatalf("a keyed late buyer on the demo: %d %s; want 409 after [exists]", rec.Code, rec.Body)
	}
	if rec := post(h, "k-win", `{"user_id":"win"}`); rec.Code != 201 || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the winner's retry: %d %s; want its 201 replayed", rec.Code, rec.Body)
	}
	if err := svc.Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	if rec := post(h, "k-later", `{"user_id":"later"}`); rec.Code != 201 {
		t.Fatalf("the refused key after a restock: %d %s; want 201", rec.Code, rec.Body)
	}
	mu.Lock()
	if fmt.Sprint(reasons) != "[sold_out_stage sold_out_remembered]" {
		t.Errorf("refusals counted %v", reasons)
	}
	reasons = nil
	mu.Unlock()

	bare := httpapi.NewServer(httpapi.Deps{Instance: "demo-2", Products: svc, Stage: "redis-atomic", RequireIdempotencyKey: true})
	if rec := post(bare, "k-none", `{"user_id":"none"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
		t.Fatalf("a keyed buyer without a store: %d %s; want 409 sold-out", rec.Code, rec.Body)
	}
	if rec := post(bare, "", `{"user_id":"none"}`); rec.Code != 400 || problemType(t, rec) != "idempotency-key-required" {
		t.Fatalf("a keyless buyer where keys are required: %d %s; want 400", rec.Code, rec.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(reasons) != "[sold_out_stage]" {
		t.Errorf("refusals counted without a store %v; want the stage's alone", reasons)
	}
}
