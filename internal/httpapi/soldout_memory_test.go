package httpapi_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/ratelimit"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// soldOutStage says every item is sold out, and counts the buys it ran.
type soldOutStage struct{ runs *atomic.Int32 }

func (s soldOutStage) Buy(context.Context, inventory.Order) error {
	s.runs.Add(1)
	return inventory.ErrSoldOut
}

// TestRememberedSoldOutIsAnsweredBeforeTheBodyIsRead: once an instance
// remembers an item sold out, a keyless buy of it is answered 409 sold-out
// from memory before its body is read: even a body that is not JSON, sent
// as text/plain, gets "sold out", and the stage does not run. A keyed buy
// still goes through its Idempotency-Key check (a replay of an earlier
// answer must stay possible): its bad body is answered as such.
func TestRememberedSoldOutIsAnsweredBeforeTheBodyIsRead(t *testing.T) {
	db := testenv.SQLite(t)
	var runs atomic.Int32
	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{}})
	h := httpapi.NewServer(httpapi.Deps{
		Instance: "memo-1",
		Products: inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": crowd.Wrap(soldOutStage{&runs})}, "memo-1", "O"),
		Stage:    "db-atomic",
	})
	send := func(body, contentType, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/api/v1/products/1/buy", strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := send(`{"user_id":"first"}`, "application/json", ""); rec.Code != 409 || problemType(t, rec) != "sold-out" || runs.Load() != 1 {
		t.Fatalf("first buy: %d %s after %d runs; want the stage's 409 sold-out", rec.Code, rec.Body, runs.Load())
	}
	for _, tc := range []struct{ body, contentType string }{
		{`{"user_id":"late"}`, "application/json"},
		{`not json at all`, "text/plain"},
		{strings.Repeat("x", 70<<10), "application/json"},
	} {
		rec := send(tc.body, tc.contentType, "")
		if rec.Code != 409 || problemType(t, rec) != "sold-out" || rec.Header().Get("X-Seckill-Stage") != "db-atomic" {
			t.Errorf("keyless buy with body %.20q (%s): %d %v %s; want 409 sold-out from memory", tc.body, tc.contentType, rec.Code, rec.Header(), rec.Body)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the stage ran %d times; want once, every later buy answered from memory", n)
	}
	if rec := send(`not json at all`, "text/plain", "key-1"); rec.Code != 415 {
		t.Errorf("keyed buy with a text/plain body: %d %s; want 415: a keyed buy is read as usual", rec.Code, rec.Body)
	}
}

// TestRateLimitedBuyIs429WithItsWait: a buyer the limiter refuses is
// answered 429 rate-limited, with Retry-After rounded up from the wait the
// limiter gave, and the stage does not run.
func TestRateLimitedBuyIs429WithItsWait(t *testing.T) {
	db := testenv.SQLite(t)
	var runs atomic.Int32
	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{},
		Admit: func(context.Context, inventory.Order) error {
			return &ratelimit.Limited{Key: "acct:x", Wait: 2500 * time.Millisecond}
		}})
	h := httpapi.NewServer(httpapi.Deps{
		Instance: "rl-1",
		Products: inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": crowd.Wrap(soldOutStage{&runs})}, "rl-1", "O"),
		Stage:    "db-atomic",
	})
	req := httptest.NewRequest("POST", "/api/v1/products/1/buy", strings.NewReader(`{"user_id":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 429 || problemType(t, rec) != "rate-limited" || rec.Header().Get("Retry-After") != "3" || runs.Load() != 0 {
		t.Fatalf("%d %v %s (stage ran %d times); want 429 rate-limited, Retry-After 3, no stage", rec.Code, rec.Header(), rec.Body, runs.Load())
	}
}

// notOpenStage says every item opens in an hour, and counts its buys.
type notOpenStage struct{ runs *atomic.Int32 }

func (s notOpenStage) Buy(_ context.Context, o inventory.Order) error {
	s.runs.Add(1)
	return &inventory.NotOpen{ItemID: o.ItemID, Wait: time.Hour}
}

// TestEarlyCrowdIsAnsweredFromMemoryBeforeTheBodyIsRead: once a stage has
// said an item opens in an hour, a keyless buy of it is answered 409
// sale-not-open from memory, with Retry-After, before its body is read
// (the window comes before the sold-out memory, as in Buy), and the stage
// does not run again.
func TestEarlyCrowdIsAnsweredFromMemoryBeforeTheBodyIsRead(t *testing.T) {
	db := testenv.SQLite(t)
	var runs atomic.Int32
	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{}})
	h := httpapi.NewServer(httpapi.Deps{
		Instance: "early-1",
		Products: inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": crowd.Wrap(notOpenStage{&runs})}, "early-1", "O"),
		Stage:    "db-atomic",
	})
	for i, tc := range []struct{ body, contentType string }{{`{"user_id":"first"}`, "application/json"}, {`not json`, "text/plain"}} {
		req := httptest.NewRequest("POST", "/api/v1/products/1/buy", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", tc.contentType)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 409 || problemType(t, rec) != "sale-not-open" || rec.Header().Get("Retry-After") == "" {
			t.Errorf("buy %d (%s): %d %v %s; want 409 sale-not-open with Retry-After", i, tc.contentType, rec.Code, rec.Header(), rec.Body)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the stage ran %d times; want once, the early crowd after it answered from memory", n)
	}
}

// lastUnitStage sells its one unit to the first buyer, then says sold
// out, and counts the buys it ran.
type lastUnitStage struct{ runs *atomic.Int32 }

func (s lastUnitStage) Buy(context.Context, inventory.Order) error {
	if s.runs.Add(1) == 1 {
		return nil
	}
	return inventory.ErrSoldOut
}

// TestKeyedBuyOfARememberedSellOutIsOneRead: once an instance remembers
// an item sold out, a keyed buy whose key was never used is answered 409
// sold-out after one plain read of its key (EXISTS), no claim script and
// no stage, and is counted once as sold out from memory; the refusal
// stores nothing, so the key still buys after a restock. A key with a
// stored answer is still replayed, and is not counted as a refusal.
func TestKeyedBuyOfARememberedSellOutIsOneRead(t *testing.T) {
	rdb := testenv.Redis(t)
	trips := &roundTrips{}
	rdb.AddHook(trips)
	db := testenv.SQLite(t)
	var runs, remembered atomic.Int32
	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{},
		Refused: func(reason string) {
			if reason == admission.RefusedRemembered {
				remembered.Add(1)
			}
		}})
	h := httpapi.NewServer(httpapi.Deps{
		Instance:    "memo-keyed",
		Products:    inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": crowd.Wrap(lastUnitStage{&runs})}, "memo-keyed", "O"),
		Stage:       "db-atomic",
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("memo-keyed") + ":idem:", Lease: time.Hour}),
	})
	if rec := post(h, "k-first", `{"user_id":"first"}`); rec.Code != 201 {
		t.Fatalf("the first keyed buy: %d %s; want 201", rec.Code, rec.Body)
	}
	if rec := post(h, "k-second", `{"user_id":"second"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" || runs.Load() != 2 {
		t.Fatalf("the second keyed buy: %d %s after %d runs; want the stage's 409 sold-out", rec.Code, rec.Body, runs.Load())
	}
	trips.take()
	rec := post(h, "k-late", `{"user_id":"late"}`)
	if got := trips.take(); rec.Code != 409 || problemType(t, rec) != "sold-out" || fmt.Sprint(got) != "[exists]" {
		t.Fatalf("a late keyed buy: %d %s, sent %v to Redis; want 409 sold-out after [exists]", rec.Code, rec.Body, got)
	}
	if runs.Load() != 2 || remembered.Load() != 1 {
		t.Fatalf("after the late keyed buy: the stage ran %d times and %d refusals were counted from memory; want 2 and 1", runs.Load(), remembered.Load())
	}
	rec = post(h, "k-first", `{"user_id":"first"}`)
	if rec.Code != 201 || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the first buyer's retry: %d %v %s; want its 201 replayed", rec.Code, rec.Header(), rec.Body)
	}
	if runs.Load() != 2 || remembered.Load() != 1 {
		t.Fatalf("after the replay: the stage ran %d times and %d refusals were counted from memory; want 2 and 1", runs.Load(), remembered.Load())
	}
	// Nothing was stored for the refusal: after a restock, which drops
	// the memory, the same key runs the stage.
	if err := crowd.Restocked(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if rec := post(h, "k-late", `{"user_id":"late"}`); rec.Code != 409 || rec.Header().Get("Idempotent-Replayed") == "true" || runs.Load() != 3 {
		t.Fatalf("the late key after the memory was dropped: %d %v %s after %d runs; want the stage run afresh", rec.Code, rec.Header(), rec.Body, runs.Load())
	}
}
