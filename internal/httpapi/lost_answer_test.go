package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/seckill-lab/seckill/internal/store"
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

// What a scriptedStage does with the next buy.
const (
	pass             int32 = iota // buy through next
	commitTimeout                 // buy, then wait out the deadline: 503 timeout
	refuse                        // write nothing, answer 503 overloaded
	commitPanic                   // buy, then panic: 500
	commitLostRPC                 // buy, then fail as a Redis call whose reply the deadline cut: 503 unavailable
	stallTimeout                  // write nothing, wait out the deadline: 503 timeout
	commitAnswerLost              // buy, then fail as a COMMIT whose answer was lost: 503 outcome-unknown
)

// scriptedStage plays, buy after buy, whatever its mode says: the ways a
// run can end with its outcome unknown to the buyer, or refused outright.
// Where a mode waits out the request's deadline, it first lets it pass
// (fall), right after the step it must follow.
type scriptedStage struct {
	next inventory.Stage
	mode *atomic.Int32
	fall func()
}

func (s scriptedStage) Buy(ctx context.Context, o inventory.Order) error {
	switch s.mode.Load() {
	case refuse:
		return fmt.Errorf("%w: scripted", inventory.ErrOverloaded)
	case stallTimeout:
		s.fall()
		<-ctx.Done()
		return ctx.Err()
	}
	if err := s.next.Buy(ctx, o); err != nil {
		return err
	}
	switch s.mode.Load() {
	case commitTimeout:
		s.fall()
		<-ctx.Done()
		return ctx.Err()
	case commitPanic:
		panic("scripted: after the commit")
	case commitAnswerLost:
		// What the store returns when the connection broke after the
		// COMMIT was sent: no deadline has passed.
		return fmt.Errorf("%w: scripted: invalid connection", inventory.ErrOutcomeUnknown)
	case commitLostRPC:
		// What RedisStream.Buy returns when the script ran and its reply
		// was cut off by the request's deadline.
		s.fall()
		<-ctx.Done()
		return fmt.Errorf("%w: queue in redis: %w", inventory.ErrUnavailable, ctx.Err())
	}
	return nil
}

// retryRig is one instance selling product 1 (and coupon batch 1) of db
// under db-atomic through a scriptedStage, with Idempotency-Keys whose
// lease is far longer than any test: a retry runs early only because the
// record says the earlier run's outcome is unknown.
type retryRig struct {
	// h answers every run, under a deadline of a minute, which no busy
	// machine reaches: a run meant to succeed never times out by
	// accident, and a run that waits out its deadline has one that
	// passes on cue (cue), right after its scripted step. A deadline of
	// 200 ms could pass before the claim or the commit, on a starved
	// machine, and the run then wrote nothing.
	h     http.Handler
	db    *store.DB
	mode  atomic.Int32
	cue   atomic.Pointer[testkit.CueDeadline]
	now   atomic.Pointer[time.Time]
	prods *inventory.Service
}

func newRetryRig(t *testing.T, db *store.DB, stock int) *retryRig {
	t.Helper()
	ctx := context.Background()
	if err := db.Products().Reset(ctx, 1, stock); err != nil {
		t.Fatal(err)
	}
	if err := db.Coupons().Reset(ctx, 1, stock); err != nil {
		t.Fatal(err)
	}
	r := &retryRig{db: db}
	start := time.Now()
	r.now.Store(&start)
	clock := func() time.Time { return *r.now.Load() }
	fall := func() { r.cue.Load().Fall() }
	r.prods = inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": scriptedStage{next: inventory.NewDBAtomic(db.Products()), mode: &r.mode, fall: fall}}, "atk-1", "O").
		WithLifecycle(inventory.Lifecycle{PaymentTimeout: time.Minute, Now: clock})
	coupons := inventory.NewService(db.Coupons(), map[string]inventory.Stage{"db-atomic": scriptedStage{next: inventory.NewDBAtomic(db.Coupons()), mode: &r.mode, fall: fall}}, "atk-1", "C")
	keys := idempotency.New(testenv.Redis(t), idempotency.Options{Prefix: testenv.Name("idem") + ":", Lease: time.Hour})
	r.h = httpapi.NewServer(httpapi.Deps{
		Instance:       "atk-1",
		Products:       r.prods,
		Coupons:        coupons,
		Stage:          "db-atomic",
		RequestTimeout: time.Minute,
		Idempotency:    keys,
	})
	return r
}

// send posts body to path with key, in mode.
func (r *retryRig) send(mode int32, path, key, body string) *httptest.ResponseRecorder {
	r.mode.Store(mode)
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	cue := testkit.NewCueDeadline()
	r.cue.Store(cue)
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, req.WithContext(cue))
	return rec
}

const buyPath, grabPath = "/api/v1/products/1/buy", "/api/v1/coupons/1/grab"

// wantOrder fails unless rec is 201 with order no.
func wantOrder(t *testing.T, what string, rec *httptest.ResponseRecorder, no string) {
	t.Helper()
	var got api.Order
	if rec.Code != 201 || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.OrderNo != no {
		t.Fatalf("%s: %d %s, want 201 with order %s", what, rec.Code, rec.Body, no)
	}
}

// TestRetryRefusedOnceStillGetsTheOrder: the first run commits and
// times out; its retry is turned away with nothing written (503
// overloaded, as a crowd of retries would be); the next retry must still
// know that the first run may have bought. An Abandon of the retaken claim
// that dropped the record forgot it, and the buyer holding an order was
// told "sold out", for good (that answer is replayed).
func TestRetryRefusedOnceStillGetsTheOrder(t *testing.T) {
	r := newRetryRig(t, testenv.SQLite(t), 1)
	body := `{"user_id":"twice-cut","quantity":1}`
	if rec := r.send(commitTimeout, buyPath, "k1", body); rec.Code != 503 || problemType(t, rec) != "timeout" {
		t.Fatalf("first run: %d %s, want 503 timeout", rec.Code, rec.Body)
	}
	held, err := r.db.Products().OrderOf(context.Background(), 1, "twice-cut")
	if err != nil {
		t.Fatalf("the first run's commit did not land: %v", err)
	}
	if rec := r.send(refuse, buyPath, "k1", body); rec.Code != 503 || problemType(t, rec) != "overloaded" {
		t.Fatalf("first retry: %d %s, want 503 overloaded", rec.Code, rec.Body)
	}
	wantOrder(t, "second retry", r.send(pass, buyPath, "k1", body), held.No)
}

// TestLostCommitAnswerIsOutcomeUnknownNotATimeout: a COMMIT whose answer
// was lost, with no deadline passed, is answered 503 outcome-unknown (it
// was called "timeout"), says when to come back, and leaves the key
// knowing the outcome is unknown: the retry finds the order the commit
// wrote.
func TestLostCommitAnswerIsOutcomeUnknownNotATimeout(t *testing.T) {
	r := newRetryRig(t, testenv.SQLite(t), 1)
	body := `{"user_id":"commit-lost","quantity":1}`
	rec := r.send(commitAnswerLost, buyPath, "k1", body)
	if rec.Code != 503 || problemType(t, rec) != "outcome-unknown" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("first run: %d %v %s, want 503 outcome-unknown with Retry-After", rec.Code, rec.Header(), rec.Body)
	}
	held, err := r.db.Products().OrderOf(context.Background(), 1, "commit-lost")
	if err != nil {
		t.Fatalf("the first run's commit did not land: %v", err)
	}
	wantOrder(t, "retry after the lost commit answer", r.send(pass, buyPath, "k1", body), held.No)
}

// TestPanicAfterTheCommitDoesNotHoldTheKey: a run that panics after
// its commit is answered 5xx by the recoverer. docs/api.md promises that
// the retry of a 500 runs, knowing the first may have bought; a panic
// unwinds past the Idempotency-Key middleware, which then settled nothing,
// and the retry was told 409 idempotency-in-flight until the lease ran out.
func TestPanicAfterTheCommitDoesNotHoldTheKey(t *testing.T) {
	r := newRetryRig(t, testenv.SQLite(t), 1)
	body := `{"user_id":"panicked","quantity":1}`
	// A panic is a bug and answers 500 internal, even under a request
	// deadline whose context is cancelled as the panic unwinds past it
	// (it was answered 503 "cancelled", an overload the lab accepts).
	if rec := r.send(commitPanic, buyPath, "k1", body); rec.Code != 500 || problemType(t, rec) != "internal" {
		t.Fatalf("first run: %d %s, want 500 internal", rec.Code, rec.Body)
	}
	held, err := r.db.Products().OrderOf(context.Background(), 1, "panicked")
	if err != nil {
		t.Fatalf("the first run's commit did not land: %v", err)
	}
	wantOrder(t, "retry after the 500", r.send(pass, buyPath, "k1", body), held.No)
}

// TestLostReplyPastTheDeadlineIsUnknown: a backend call cut off by
// the request's deadline after it took effect (a Redis script that ran,
// its reply lost) comes back wrapped as ErrUnavailable, 503 "unavailable",
// not "timeout". The deadline had passed: the outcome is just as unknown.
func TestLostReplyPastTheDeadlineIsUnknown(t *testing.T) {
	r := newRetryRig(t, testenv.SQLite(t), 1)
	body := `{"user_id":"lost-rpc","quantity":1}`
	if rec := r.send(commitLostRPC, buyPath, "k1", body); rec.Code != 503 {
		t.Fatalf("first run: %d %s, want 503", rec.Code, rec.Body)
	}
	held, err := r.db.Products().OrderOf(context.Background(), 1, "lost-rpc")
	if err != nil {
		t.Fatalf("the first run's write did not land: %v", err)
	}
	wantOrder(t, "retry", r.send(pass, buyPath, "k1", body), held.No)
}

// TestRetryGetsOnlyItsOwnBuyersOrder: a retry by ALICE (whose first
// run timed out without buying) must not be answered with alice's order.
// MySQL used to compare user ids case- and accent-blind (the default
// collations, before sql/mysql/004_exact_user_ids.sql), so OrderOf found
// alice's row for ALICE; the service checks the buyer of what it finds.
func TestRetryGetsOnlyItsOwnBuyersOrder(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			r := newRetryRig(t, b.Open(t), 2)
			victim := r.send(pass, buyPath, "", `{"user_id":"alice","quantity":1}`)
			var vo api.Order
			if victim.Code != 201 || json.Unmarshal(victim.Body.Bytes(), &vo) != nil {
				t.Fatalf("alice's buy: %d %s", victim.Code, victim.Body)
			}
			body := `{"user_id":"ALICE","quantity":1}`
			if rec := r.send(stallTimeout, buyPath, "k1", body); rec.Code != 503 || problemType(t, rec) != "timeout" {
				t.Fatalf("ALICE's first run: %d %s, want 503 timeout", rec.Code, rec.Body)
			}
			retry := r.send(pass, buyPath, "k1", body)
			var got api.Order
			if json.Unmarshal(retry.Body.Bytes(), &got) == nil && got.OrderNo == vo.OrderNo {
				t.Fatalf("ALICE's retry was answered %d with alice's order: %s", retry.Code, retry.Body)
			}
			if retry.Code == 201 && got.UserID != "ALICE" {
				t.Fatalf("ALICE's retry: %d %s, an order of another buyer", retry.Code, retry.Body)
			}
		})
	}
}

// TestCouponGrabRetryGetsTheGrab: grabs share the path; the retry of
// a grab that committed and timed out answers with the grab, and its
// replay is byte for byte.
func TestCouponGrabRetryGetsTheGrab(t *testing.T) {
	r := newRetryRig(t, testenv.SQLite(t), 1)
	body := `{"user_id":"grabber"}`
	if rec := r.send(commitTimeout, grabPath, "g1", body); rec.Code != 503 || problemType(t, rec) != "timeout" {
		t.Fatalf("first grab: %d %s, want 503 timeout", rec.Code, rec.Body)
	}
	held, err := r.db.Coupons().OrderOf(context.Background(), 1, "grabber")
	if err != nil {
		t.Fatalf("the first grab did not land: %v", err)
	}
	if rec := r.send(pass, grabPath, "", `{"user_id":"other"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
		t.Fatalf("the batch must be gone: %d %s", rec.Code, rec.Body)
	}
	retry := r.send(pass, grabPath, "g1", body)
	var got api.Grab
	if retry.Code != 201 || json.Unmarshal(retry.Body.Bytes(), &got) != nil || got.OrderNo != held.No || got.UserID != "grabber" {
		t.Fatalf("retry: %d %s, want 201 with grab %s", retry.Code, retry.Body, held.No)
	}
	replay := r.send(pass, grabPath, "g1", body)
	if replay.Code != 201 || replay.Header().Get("Idempotent-Replayed") != "true" || replay.Body.String() != retry.Body.String() {
		t.Fatalf("replay: %d %s", replay.Code, replay.Body)
	}
	if rec := r.send(pass, grabPath, "g1", `{"user_id": "grabber"}`); rec.Code != 422 {
		t.Fatalf("another body under the settled key: %d %s, want 422", rec.Code, rec.Body)
	}
	a, err := r.db.Coupons().Audit(context.Background(), 1)
	if err != nil || a.Orders != 1 || a.Stock != 0 {
		t.Fatalf("one grab, stock 0: %+v %v", a, err)
	}
}

// TestRetakenKeyWithAnotherBodyIs422: a key left "tried" by a
// timeout is the buyer's; the same key with another body (another buyer,
// another quantity) is refused, and does not consume the tombstone.
func TestRetakenKeyWithAnotherBodyIs422(t *testing.T) {
	r := newRetryRig(t, testenv.SQLite(t), 1)
	body := `{"user_id":"keyholder","quantity":1}`
	if rec := r.send(commitTimeout, buyPath, "k1", body); rec.Code != 503 {
		t.Fatalf("first run: %d %s", rec.Code, rec.Body)
	}
	held, err := r.db.Products().OrderOf(context.Background(), 1, "keyholder")
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{`{"user_id":"keyholder","quantity":2}`, `{"user_id":"keyholder","quantity":1} `} {
		if rec := r.send(pass, buyPath, "k1", other); rec.Code != 422 || problemType(t, rec) != "idempotency-mismatch" {
			t.Fatalf("another body %q: %d %s, want 422", other, rec.Code, rec.Body)
		}
	}
	wantOrder(t, "the real retry", r.send(pass, buyPath, "k1", body), held.No)
}

// TestCancelledOrderIsNotReturned: the first run committed and timed
// out; the buyer never paid, and the payment timeout cancelled the order
// and gave its unit back. The retry must not be told 201 with a cancelled
// order: it is refused (the one-per-user row is still there) and nothing
// is sold twice.
func TestCancelledOrderIsNotReturned(t *testing.T) {
	r := newRetryRig(t, testenv.SQLite(t), 1)
	ctx := context.Background()
	body := `{"user_id":"slow-payer","quantity":1}`
	if rec := r.send(commitTimeout, buyPath, "k1", body); rec.Code != 503 {
		t.Fatalf("first run: %d %s", rec.Code, rec.Body)
	}
	held, err := r.db.Products().OrderOf(ctx, 1, "slow-payer")
	if err != nil {
		t.Fatal(err)
	}
	later := r.now.Load().Add(2 * time.Minute)
	r.now.Store(&later)
	if rep, err := r.prods.CancelUnpaid(ctx); err != nil || rep.Cancelled != 1 {
		t.Fatalf("CancelUnpaid = %+v, %v; want the order cancelled", rep, err)
	}
	retry := r.send(pass, buyPath, "k1", body)
	var got api.Order
	if json.Unmarshal(retry.Body.Bytes(), &got) == nil && got.OrderNo == held.No {
		t.Fatalf("the retry was answered with the cancelled order: %d %s", retry.Code, retry.Body)
	}
	if retry.Code != 409 {
		t.Fatalf("retry: %d %s, want 409", retry.Code, retry.Body)
	}
	a, err := r.db.Products().Audit(ctx, 1)
	if err != nil || a.Orders != 0 || a.Stock != 1 || !a.Conserved() {
		t.Fatalf("no live order, the unit back: %+v %v", a, err)
	}
}
