package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// postBy is post under ctx (a deadline that passes on cue, say).
func postBy(h http.Handler, ctx context.Context, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/api/v1/products/1/buy", strings.NewReader(body)).WithContext(ctx)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// lostAnswerStage, while cut is set, writes the order through next and
// then lets the request's deadline pass (cut's Fall) and waits it out: the
// commit lands and the buyer is told "timeout", as when a deadline (or a
// crash) falls between a commit and its answer.
type lostAnswerStage struct {
	next inventory.Stage
	cut  *atomic.Pointer[testkit.CueDeadline]
}

func (s lostAnswerStage) Buy(ctx context.Context, o inventory.Order) error {
	cue := s.cut.Load()
	if err := s.next.Buy(ctx, o); err != nil || cue == nil {
		return err
	}
	cue.Fall()
	<-ctx.Done()
	return ctx.Err()
}

// TestRetryAfterALostAnswerGetsTheOrder: a buyer whose buy committed but
// was answered 503 timeout retries with the same Idempotency-Key after the
// item sold out. The retry must answer with the buyer's order (201), not
// "sold out": the stage checks the stock before it looks for a repeat
// buyer, so without the Idempotency-Key record remembering that the first
// run's outcome is unknown, the buyer would be told it has nothing.
func TestRetryAfterALostAnswerGetsTheOrder(t *testing.T) {
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	ctx := context.Background()
	if err := db.Products().Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	var cut atomic.Pointer[testkit.CueDeadline]
	cue := testkit.NewCueDeadline()
	cut.Store(cue)
	stages := map[string]inventory.Stage{"db-atomic": lostAnswerStage{next: inventory.NewDBAtomic(db.Products()), cut: &cut}}
	h := httpapi.NewServer(httpapi.Deps{
		Instance:       "lost-1",
		Products:       inventory.NewService(db.Products(), stages, "lost-1", "O"),
		Stage:          "db-atomic",
		RequestTimeout: time.Minute, // the first buy's deadline passes on cue
		// A lease far longer than the test: the retry runs because the
		// first run was marked unknown, not because its lease ran out.
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("idem") + ":", Lease: time.Hour}),
	})
	body := `{"user_id":"lost-buyer","quantity":1}`

	first := postBy(h, cue, "lost-key", body)
	if first.Code != 503 || problemType(t, first) != "timeout" {
		t.Fatalf("the first buy: %d %s, want 503 timeout", first.Code, first.Body)
	}
	held, err := db.Products().OrderOf(ctx, 1, "lost-buyer")
	if err != nil {
		t.Fatalf("the first buy's commit did not land: %v", err)
	}
	t.Logf("the first buy committed order %s and its buyer was told 503 timeout", held.No)
	cut.Store(nil)

	if rec := post(h, "", `{"user_id":"someone-else","quantity":1}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
		t.Fatalf("the item must now be sold out: %d %s", rec.Code, rec.Body)
	}
	retry := post(h, "lost-key", body)
	var got api.Order
	if retry.Code != 201 || json.Unmarshal(retry.Body.Bytes(), &got) != nil || got.OrderNo != held.No {
		t.Fatalf("the retry with the same key: %d %s, want 201 with order %s", retry.Code, retry.Body, held.No)
	}
	replay := post(h, "lost-key", body)
	if replay.Code != 201 || replay.Header().Get("Idempotent-Replayed") != "true" || replay.Body.String() != retry.Body.String() {
		t.Fatalf("after the retry, the key replays its answer: %d %s", replay.Code, replay.Body)
	}
	// Without a key nothing tells a retry from a new buyer: the plain answer.
	if rec := post(h, "", body); rec.Code != 409 {
		t.Fatalf("a keyless repeat: %d %s, want 409", rec.Code, rec.Body)
	}
	a, err := db.Products().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != 1 || a.Stock != 0 || a.Oversold() != 0 {
		t.Fatalf("one order, stock 0: %+v", a)
	}
}
