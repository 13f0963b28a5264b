package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// gatedLedger is the database under redis-atomic; while armed, the next
// Deduct says so on entered and waits for release before it writes.
type gatedLedger struct {
	*store.Ledger
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedLedger) Deduct(ctx context.Context, o inventory.Order) error {
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Ledger.Deduct(ctx, o)
}

// claimGate is a Redis hook: while armed, the first script whose keys
// include the idempotency prefix (the claim) returns, then the request
// waits on release before it goes on to the stage.
type claimGate struct {
	prefix  string
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *claimGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *claimGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *claimGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := strings.ToLower(cmd.Name())
		if name != "evalsha" && name != "eval" {
			return err
		}
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, h.prefix) {
				if h.armed.CompareAndSwap(true, false) {
					h.entered <- struct{}{}
					<-h.release
				}
				break
			}
		}
		return err
	}
}

type refusalRig struct {
	h          http.Handler
	rdb        *redis.Client
	svc        *inventory.Service
	redisStock *redisstage.RedisAtomic
	ledger     *gatedLedger
	db         *store.DB
	idem       *idempotency.Store
	gate       *claimGate
	stage      string
	kind       string
}

// newRefusalRig sells product 1 (stock units) under stageName with the
// records on the stage's own client, so every keyed buy runs the check,
// which takes the units (inventory.Fold).
func newRefusalRig(t *testing.T, stageName string, stock int, lease time.Duration) *refusalRig {
	return newRefusalRigCrowd(t, stageName, stock, lease, nil)
}

// newRefusalRigCrowd is newRefusalRig with the stage behind crowd, when
// not nil.
func newRefusalRigCrowd(t *testing.T, stageName string, stock int, lease time.Duration, crowd *admission.Crowd) *refusalRig {
	t.Helper()
	if crowd == nil {
		return newRefusalRigWrapped(t, stageName, stock, lease, nil)
	}
	return newRefusalRigWrapped(t, stageName, stock, lease, crowd.Wrap)
}

// newRefusalRigWrapped is newRefusalRig with the stage wrapped by wrap
// (nil: not wrapped).
func newRefusalRigWrapped(t *testing.T, stageName string, stock int, lease time.Duration, wrap func(inventory.Stage) inventory.Stage) *refusalRig {
	t.Helper()
	ctx := context.Background()
	db := testenv.SQLite(t)
	if err := db.Products().Reset(ctx, 1, stock); err != nil {
		t.Fatal(err)
	}
	rdb := testenv.Redis(t)
	kind := testenv.Name("refatk")
	idemPrefix := kind + ":idem:"
	gate := &claimGate{prefix: idemPrefix, entered: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(gate)
	led := &gatedLedger{Ledger: db.Products(), entered: make(chan struct{}), release: make(chan struct{})}
	redisStock := redisstage.NewRedisAtomic(rdb, led, kind, nil)
	stage := inventory.Stage(redisStock)
	if stageName == "redis-stream" {
		stage = redisstage.NewRedisStream(redisStock, redisstage.StreamOptions{})
	}
	if wrap != nil {
		stage = wrap(stage)
	}
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{stageName: stage}, "refatk-1", "O")
	idem := idempotency.New(rdb, idempotency.Options{Prefix: idemPrefix, Lease: lease})
	h := httpapi.NewServer(httpapi.Deps{Instance: "refatk-1", Products: svc, Stage: stageName, Idempotency: idem})
	return &refusalRig{db: db, h: h, rdb: rdb, svc: svc, redisStock: redisStock, ledger: led, idem: idem, gate: gate, stage: stageName, kind: kind}
}

// noOversell fails when the Redis copy went below zero or sold more units
// than it had.
func (r *refusalRig) noOversell(t *testing.T, initial int) {
	t.Helper()
	ctx := context.Background()
	stock, err := r.rdb.Get(ctx, fmt.Sprintf("seckill:{%s:1}:stock", r.kind)).Int()
	if err != nil {
		t.Fatal(err)
	}
	buyers, _ := r.rdb.SCard(ctx, fmt.Sprintf("seckill:{%s:1}:buyers", r.kind)).Result()
	if stock < 0 || int(buyers) > initial {
		t.Fatalf("oversold: Redis stock %d, %d buyers of %d units", stock, buyers, initial)
	}
	if r.stage == "redis-atomic" {
		a, err := r.svc.Audit(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if a.Oversold() > 0 || !a.Conserved() {
			t.Fatalf("audit: %+v", a)
		}
	}
}

func orderOf(t *testing.T, rec *httptest.ResponseRecorder) api.Order {
	t.Helper()
	var o api.Order
	if rec.Code != http.StatusCreated && rec.Code != http.StatusAccepted || json.Unmarshal(rec.Body.Bytes(), &o) != nil {
		t.Fatalf("want an order (201/202): %d %s", rec.Code, rec.Body)
	}
	return o
}

func want409(t *testing.T, what string, rec *httptest.ResponseRecorder, slug string) {
	t.Helper()
	if rec.Code != http.StatusConflict || problemType(t, rec) != slug {
		t.Fatalf("%s: %d %s, want 409 %s", what, rec.Code, rec.Body, slug)
	}
}

// TestRefusalLostAnswerOfTheLastUnit: the first run with a key buys
// the last unit and its answer is lost (a crash: the lease ran out; or a
// timeout: the record says "tried"). Everything the check reads now says
// "refuse" (stock 0, the buyer in the buyers set), so a check run on the
// retry would answer 409; the retry must get its order instead. A stranger
// with a fresh key is refused by the check, and a retry with another body
// is 422, not the check's 409.
func TestRefusalLostAnswerOfTheLastUnit(t *testing.T) {
	for _, stageName := range []string{"redis-atomic", "redis-stream"} {
		for _, how := range []string{"lease-expired", "tried"} {
			t.Run(stageName+"/"+how, func(t *testing.T) {
				r := newRefusalRig(t, stageName, 1, 300*time.Millisecond)
				ctx := context.Background()
				body := `{"user_id":"alice","quantity":1}`
				// The first run, as the middleware does it, cut off before
				// its answer.
				claim, stored, err := r.idem.Begin(ctx, "alice", buyPath, "k1", idempotency.Fingerprint("POST", buyPath, []byte(body)))
				if err != nil || stored != nil {
					t.Fatalf("claim: %v %v", stored, err)
				}
				first, err := r.svc.Buy(ctx, stageName, inventory.Request{ItemID: 1, UserID: "alice", Quantity: 1})
				if err != nil {
					t.Fatal(err)
				}
				if how == "tried" {
					if err := r.idem.Unknown(ctx, claim); err != nil {
						t.Fatal(err)
					}
				} else {
					time.Sleep(400 * time.Millisecond)
				}
				want409(t, "a stranger", post(r.h, "k2", `{"user_id":"bob","quantity":1}`), "sold-out")
				want409(t, "alice with a new key", post(r.h, "k3", body), "already-purchased")
				if rec := post(r.h, "k1", `{"user_id":"alice","quantity":2}`); rec.Code != http.StatusUnprocessableEntity {
					t.Fatalf("the lost key with another body: %d %s, want 422", rec.Code, rec.Body)
				}
				retry := post(r.h, "k1", body)
				if o := orderOf(t, retry); o.OrderNo != first.No || o.UserID != "alice" {
					t.Fatalf("the retry got order %s, want %s", o.OrderNo, first.No)
				}
				replay := post(r.h, "k1", body)
				if replay.Header().Get("Idempotent-Replayed") != "true" || replay.Code != retry.Code || replay.Body.String() != retry.Body.String() {
					t.Fatalf("replay: %d %q, want %d %q", replay.Code, replay.Body, retry.Code, retry.Body)
				}
				r.noOversell(t, 1)
			})
		}
	}
}

// TestRefusalDuplicatesWhileTheFirstIsInFlight: the first run holds
// the last unit as a reservation (paused before its database write). Its
// duplicates must be told in-flight (not run, not refused by the check);
// another buyer finds stock 0 with a reservation pending, which the check
// must not call sold-out for good, and the stage's answer is not stored.
// The first then answers 201, replayed byte for byte.
func TestRefusalDuplicatesWhileTheFirstIsInFlight(t *testing.T) {
	r := newRefusalRig(t, "redis-atomic", 1, time.Hour)
	body := `{"user_id":"alice","quantity":1}`
	r.ledger.armed.Store(true)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- post(r.h, "dup", body) }()
	<-r.ledger.entered

	var wg sync.WaitGroup
	dups := make([]*httptest.ResponseRecorder, 16)
	for i := range dups {
		wg.Add(1)
		go func(i int) { defer wg.Done(); dups[i] = post(r.h, "dup", body) }(i)
	}
	wg.Wait()
	for i, rec := range dups {
		want409(t, fmt.Sprintf("duplicate %d", i), rec, "idempotency-in-flight")
	}
	want409(t, "another buyer while the unit is reserved", post(r.h, "bob-key", `{"user_id":"bob","quantity":1}`), "sold-out")
	close(r.ledger.release)
	first := <-done
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	for i := 0; i < 3; i++ {
		rec := post(r.h, "dup", body)
		if rec.Header().Get("Idempotent-Replayed") != "true" || rec.Code != 201 || rec.Body.String() != first.Body.String() {
			t.Fatalf("replay %d: %d %q, want %q", i, rec.Code, rec.Body, first.Body)
		}
	}
	// Bob's 409 was not stored: with another body the key runs (409 from the
	// check, not 422).
	want409(t, "bob's key, other body", post(r.h, "bob-key", `{"user_id":"bob","quantity":2}`), "sold-out")
	r.noOversell(t, 1)
}

// checkOnly is a stage whose claim only checks (no Fold), as a stage
// that cannot fold its script is: the stage runs after the claim.
type checkOnly struct {
	inventory.Stage
	inventory.RefusalChecker
}

// TestRefusalClaimedThenSoldOut: the check passes and claims the key,
// then (paused between the claim and the stage) another buyer takes the
// last unit. The stage answers sold-out: the claim must be let go, so a
// retry after a restock buys, and a duplicate during the pause is
// in-flight, not run. The claim here only checks (checkOnly: a claim that
// folds takes the unit itself), so the stage runs after the pause.
func TestRefusalClaimedThenSoldOut(t *testing.T) {
	for _, stageName := range []string{"redis-atomic", "redis-stream"} {
		t.Run(stageName, func(t *testing.T) {
			crowd := admission.NewCrowd(admission.CrowdOptions{Kind: "product", Admit: func(context.Context, inventory.Order) error { return nil }})
			r := newRefusalRigWrapped(t, stageName, 1, time.Hour, func(st inventory.Stage) inventory.Stage {
				return crowd.Wrap(checkOnly{st, st.(inventory.RefusalChecker)})
			})
			// Load the copy and the scripts first.
			want409(t, "warm", post(r.h, "warm", `{"user_id":"x","quantity":2}`), "sold-out")
			body := `{"user_id":"late","quantity":1}`
			r.gate.armed.Store(true)
			done := make(chan *httptest.ResponseRecorder)
			go func() { done <- post(r.h, "late-key", body) }()
			<-r.gate.entered
			want409(t, "a duplicate after the claim", post(r.h, "late-key", body), "idempotency-in-flight")
			orderOf(t, post(r.h, "early-key", `{"user_id":"early","quantity":1}`))
			close(r.gate.release)
			want409(t, "the claimed buy", <-done, "sold-out")
			want409(t, "its retry", post(r.h, "late-key", body), "sold-out")
			if err := r.db.Products().Reset(context.Background(), 1, 1); err != nil {
				t.Fatal(err)
			}
			if err := r.redisStock.Reset(context.Background(), 1, 1); err != nil {
				t.Fatal(err)
			}
			o := orderOf(t, post(r.h, "late-key", body))
			if o.UserID != "late" {
				t.Fatalf("retry after restock: %+v", o)
			}
		})
	}
}

// TestRefusalFoldHoldsItsUnitThroughThePause: the claim takes the
// last unit (inventory.Fold), then the request pauses before the stage.
// Another keyed buyer meanwhile is told sold out (for now: a unit is in
// flight), and its key is let go; a duplicate of the paused request is in
// flight. The paused buy then gets its order, and after a restock the
// other buyer's retry buys. (That a folded buy passes a full line is
// TestFoldedBuyPassesAFullLine, in internal/inventory.)
func TestRefusalFoldHoldsItsUnitThroughThePause(t *testing.T) {
	for _, stageName := range []string{"redis-atomic", "redis-stream"} {
		t.Run(stageName, func(t *testing.T) {
			r := newRefusalRigCrowd(t, stageName, 1, time.Hour, admission.NewCrowd(admission.CrowdOptions{Kind: "product", Queue: 1}))
			want409(t, "warm", post(r.h, "warm", `{"user_id":"x","quantity":2}`), "sold-out")
			body := `{"user_id":"late","quantity":1}`
			r.gate.armed.Store(true)
			done := make(chan *httptest.ResponseRecorder)
			go func() { done <- post(r.h, "late-key", body) }()
			<-r.gate.entered
			want409(t, "a duplicate after the claim", post(r.h, "late-key", body), "idempotency-in-flight")
			want409(t, "another buyer while the unit is in flight", post(r.h, "early-key", `{"user_id":"early","quantity":1}`), "sold-out")
			close(r.gate.release)
			if o := orderOf(t, <-done); o.UserID != "late" {
				t.Fatalf("the paused buy: %+v, want late's order", o)
			}
			r.noOversell(t, 1)
			if err := r.db.Products().Reset(context.Background(), 1, 1); err != nil {
				t.Fatal(err)
			}
			if err := r.redisStock.Reset(context.Background(), 1, 1); err != nil {
				t.Fatal(err)
			}
			if o := orderOf(t, post(r.h, "early-key", `{"user_id":"early","quantity":1}`)); o.UserID != "early" {
				t.Fatalf("the other buyer's retry after a restock: %+v", o)
			}
		})
	}
}

// TestRefusalTakeoverRefusedKeepsTried: the first run is paused with
// its unit reserved past its lease; a retry takes the key over and is
// refused as a repeat buyer with no order written yet: it is told 503
// outcome-unknown (the first run may still write it, or fail), not 409
// already-purchased, which tells of an order. That answer must not let
// the key go (a fresh claim would meet the check: already-purchased for
// good): once the first run commits, the next retry gets its order.
func TestRefusalTakeoverRefusedKeepsTried(t *testing.T) {
	r := newRefusalRig(t, "redis-atomic", 1, 300*time.Millisecond)
	body := `{"user_id":"alice","quantity":1}`
	r.ledger.armed.Store(true)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- post(r.h, "k", body) }()
	<-r.ledger.entered
	time.Sleep(400 * time.Millisecond)
	if rec := post(r.h, "k", body); rec.Code != http.StatusServiceUnavailable || problemType(t, rec) != "outcome-unknown" {
		t.Fatalf("the takeover while the first is unwritten: %d %s, want 503 outcome-unknown", rec.Code, rec.Body)
	}
	close(r.ledger.release)
	first := orderOf(t, <-done)
	retry := orderOf(t, post(r.h, "k", body))
	if retry.OrderNo != first.OrderNo {
		t.Fatalf("retry got %s, want the first run's %s", retry.OrderNo, first.OrderNo)
	}
	r.noOversell(t, 1)
}

// dropClaimReply is a Redis hook: while armed, the first script whose
// keys include the idempotency prefix (the claim) runs, and its reply is
// lost on the way back, as when a connection drops.
type dropClaimReply struct {
	prefix string
	armed  atomic.Bool
}

func (h *dropClaimReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *dropClaimReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *dropClaimReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := strings.ToLower(cmd.Name()); name != "evalsha" && name != "eval" {
			return err
		}
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, h.prefix) && h.armed.CompareAndSwap(true, false) {
				return &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset (the claim's reply was dropped)")}
			}
		}
		return err
	}
}

// TestRefusalFoldedClaimReplyLost: the claim's script takes the
// unit and its reply is lost. Under redis-stream the order is queued and
// the writers would write it: the buyer hears 503 outcome-unknown, never
// "unavailable, nothing was done", and the key is marked tried at once (no
// wait for the claim's lease), so the retry gets that very order, not a
// second one. Under redis-atomic nothing writes the order: the buyer hears
// the plain 503, the reconcile job gives the stale reservation back, and
// the retry buys; one unit is sold in all.
func TestRefusalFoldedClaimReplyLost(t *testing.T) {
	for _, stageName := range []string{"redis-atomic", "redis-stream"} {
		t.Run(stageName, func(t *testing.T) {
			r := newRefusalRig(t, stageName, 1, time.Hour)
			want409(t, "warm", post(r.h, "warm", `{"user_id":"x","quantity":2}`), "sold-out")
			body := `{"user_id":"late","quantity":1}`
			first := postWithClaimReplyLost(t, r, "late-key", body)
			wantType := "unavailable"
			if stageName == "redis-stream" {
				wantType = "outcome-unknown"
			}
			if first.Code != http.StatusServiceUnavailable || problemType(t, first) != wantType {
				t.Fatalf("a claim whose reply was lost: %d %s, want 503 %s", first.Code, first.Body, wantType)
			}
			ctx := context.Background()
			if stageName == "redis-stream" {
				queued, err := r.rdb.HGetAll(ctx, fmt.Sprintf("seckill:{%s:1}:queued", r.kind)).Result()
				if err != nil || len(queued) != 1 {
					t.Fatalf("queued after the lost reply: %v %v, want the one order", queued, err)
				}
				o := orderOf(t, post(r.h, "late-key", body))
				if _, ok := queued[o.OrderNo]; !ok || o.UserID != "late" {
					t.Fatalf("the retry got %+v, want the queued order %v", o, queued)
				}
				r.noOversell(t, 1)
				return
			}
			// The reservation's request is over and its order was never
			// written: the reconcile job gives the unit back.
			d, err := r.redisStock.Repair(ctx, 1, 0, func(context.Context, string) (bool, error) { return false, nil })
			if err != nil || d.Resolved != 1 {
				t.Fatalf("repair: %+v %v, want the stale reservation given back", d, err)
			}
			if o := orderOf(t, post(r.h, "late-key", body)); o.UserID != "late" {
				t.Fatalf("the retry: %+v", o)
			}
			r.noOversell(t, 1)
		})
	}
}

// TestRetryOfALostFoldedClaimIsNotAlreadyPurchased: under redis-atomic a
// keyed buy whose claim took a unit and lost its reply is answered 503
// unavailable (no order is written for it; the reconcile job gives the
// unit back) and its key is marked tried. Its retry before that repair
// finds the buyer listed among the reservations and no order: it must
// not hear 409 already-purchased, which tells of an order the buyer does
// not have (on serve, with Redis SIGSTOPped mid-sale, 4 of 450 keyed
// buyers heard it and owned nothing), but 503 outcome-unknown, the key
// kept tried; after the repair the retry buys.
func TestRetryOfALostFoldedClaimIsNotAlreadyPurchased(t *testing.T) {
	r := newRefusalRig(t, "redis-atomic", 2, time.Hour)
	want409(t, "warm", post(r.h, "warm", `{"user_id":"x","quantity":3}`), "sold-out")
	body := `{"user_id":"late","quantity":1}`
	first := postWithClaimReplyLost(t, r, "late-key", body)
	if first.Code != http.StatusServiceUnavailable || problemType(t, first) != "unavailable" {
		t.Fatalf("a claim whose reply was lost: %d %s, want 503 unavailable", first.Code, first.Body)
	}
	ctx := context.Background()
	retry := post(r.h, "late-key", body)
	if _, err := r.db.Products().OrderOf(ctx, 1, "late"); err == nil {
		t.Fatalf("an order was written for the lost claim (the retry answered %d %s)", retry.Code, retry.Body)
	}
	if retry.Code != http.StatusServiceUnavailable || problemType(t, retry) != "outcome-unknown" {
		t.Fatalf("the retry before the repair, the buyer owning no order: %d %s, want 503 outcome-unknown", retry.Code, retry.Body)
	}
	d, err := r.redisStock.Repair(ctx, 1, 0, func(context.Context, string) (bool, error) { return false, nil })
	if err != nil || d.Resolved != 1 {
		t.Fatalf("repair: %+v %v, want the stale reservation given back", d, err)
	}
	if o := orderOf(t, post(r.h, "late-key", body)); o.UserID != "late" {
		t.Fatalf("the retry after the repair: %+v", o)
	}
	r.noOversell(t, 2)
}

// postWithClaimReplyLost posts a keyed buy whose claim's reply Redis
// drops (the claim runs; its answer never comes back).
func postWithClaimReplyLost(t *testing.T, r *refusalRig, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	drop := &dropClaimReply{prefix: r.kind + ":idem:"}
	r.rdb.AddHook(drop)
	drop.armed.Store(true)
	rec := post(r.h, key, body)
	if drop.armed.Load() {
		t.Fatal("the claim's reply was never dropped")
	}
	return rec
}
