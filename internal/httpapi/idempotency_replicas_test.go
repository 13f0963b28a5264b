package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestUnconfirmedClaimOfAFoldTakesNothing: records confirmed on a replica
// (idempotency.Options.Replicas), kept on redis-atomic's own Redis, where
// a keyed buy's claim could also take its unit (inventory.Fold). The
// replica is cut off, so no claim is confirmed and no buy runs: the buyer
// hears 503. That answer must be all that happened. A claim that took the
// unit anyway left it reserved, with the buyer in the item's buyers, and
// no order: once the replica was back, the retry was told 409
// already-purchased, with nothing bought, and so was every retry until
// the reconcile job gave the unit back. The retry must buy.
func TestUnconfirmedClaimOfAFoldTakesNothing(t *testing.T) {
	r := newReplicaRig(t)
	ctx := context.Background()
	r.cutOff(t)
	body := `{"user_id":"alice","quantity":1}`
	first := post(r.cut, "alice-key", body)
	if first.Code != http.StatusServiceUnavailable {
		t.Fatalf("a keyed buy whose claim no replica confirmed: %d %s, want 503", first.Code, first.Body)
	}
	if _, err := r.db.Products().OrderOf(ctx, 1, "alice"); err == nil {
		t.Fatalf("the buy ran under a claim no replica confirmed (answered %s)", first.Body)
	}

	r.restore(t)
	retry := post(r.h, "alice-key", body)
	if retry.Code != http.StatusCreated {
		t.Fatalf("the retry once the replica is back: %d %s, want the unit bought (201); the first try heard %d %s", retry.Code, retry.Body, first.Code, first.Body)
	}
	if o := orderOf(t, retry); o.UserID != "alice" {
		t.Fatalf("the retry's order: %+v", o)
	}
	r.conserved(t, 1)
}

// TestUnconfirmedRetakenClaimIsNotNothingWritten: the first run with a
// key bought and its answer was lost (the key says "tried"). Its retry's
// claim no replica confirms does not run, so it cannot look for that
// order; it must not be told 503 unavailable, "nothing was written",
// while the buyer holds an order, but that the outcome is still unknown.
// Once the replica is back, the retry gets the order.
func TestUnconfirmedRetakenClaimIsNotNothingWritten(t *testing.T) {
	r := newReplicaRig(t)
	ctx := context.Background()
	body := `{"user_id":"bob","quantity":1}`
	// The first run: its buy committed, its answer was lost.
	const path = "/api/v1/products/1/buy"
	c, _, err := r.idem.Begin(ctx, "bob", path, "bob-key", idempotency.Fingerprint("POST", path, []byte(body)))
	if err != nil || c == nil {
		t.Fatalf("the first run's claim: %v", err)
	}
	bought := orderOf(t, post(r.h, "", body))
	if err := r.idem.Unknown(ctx, c); err != nil {
		t.Fatal(err)
	}

	r.cutOff(t)
	retry := post(r.cut, "bob-key", body)
	if retry.Code != http.StatusServiceUnavailable || problemType(t, retry) != "outcome-unknown" {
		t.Fatalf("the retry of a buy that bought, its claim unconfirmed: %d %s; want 503 outcome-unknown (the buyer holds order %s)", retry.Code, retry.Body, bought.OrderNo)
	}

	r.restore(t)
	again := post(r.h, "bob-key", body)
	if o := orderOf(t, again); o.OrderNo != bought.OrderNo {
		t.Fatalf("the retry once the replica is back got %+v, want order %s", o, bought.OrderNo)
	}
	r.conserved(t, 1)
}

// replicaRig sells product 1 (one unit) under redis-atomic on a primary
// with a replica, its Idempotency-Key records on the same Redis,
// confirmed on the replica (idempotency.Options.Replicas): a keyed buy's
// claim could take its unit (inventory.Fold). h and cut serve the same
// sale and the same records, and differ only in how long a claim waits
// for the replica: cut is for buys sent while the replica is cut off,
// whose every claim waits its bound out.
type replicaRig struct {
	h, cut           http.Handler
	db               *store.DB
	svc              *inventory.Service
	idem             *idempotency.Store
	primary, replica *testenv.RedisProcess
}

func newReplicaRig(t *testing.T) *replicaRig {
	t.Helper()
	ctx := context.Background()
	db := testenv.SQLite(t)
	if err := db.Products().Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	primary, replica := testenv.StartReplicaPair(t)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	kind := testenv.Name("idemrepl")
	stock := redisstage.NewRedisAtomic(rdb, db.Products(), kind, nil)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": stock}, "repl-1", "O")
	// WAIT answers as soon as the replica confirms; the bound only covers
	// a replica slowed by CPU hogs. Where none can confirm, the claim
	// waits its bound out: those buys go through cut, whose bound is
	// short.
	idem := idempotency.New(rdb, idempotency.Options{Prefix: kind + ":idem:", Replicas: 1, ReplicaWait: 5 * time.Second})
	short := idempotency.New(rdb, idempotency.Options{Prefix: kind + ":idem:", Replicas: 1, ReplicaWait: 250 * time.Millisecond})
	if !idem.Checks(rdb) || !short.Checks(rdb) {
		t.Fatal("the store must keep its records on the stage's Redis, where the claim can take the unit")
	}
	deps := httpapi.Deps{Instance: "repl-1", Products: svc, Stage: "redis-atomic", Idempotency: idem, RequestTimeout: time.Minute}
	h := httpapi.NewServer(deps)
	deps.Idempotency = short
	cut := httpapi.NewServer(deps)
	// The Redis copy is loaded (a buy of more than the stock).
	want409(t, "warm", post(h, "warm", `{"user_id":"warm","quantity":2}`), "sold-out")
	return &replicaRig{h: h, cut: cut, db: db, svc: svc, idem: idem, primary: primary, replica: replica}
}

// replicas is whether the primary has n replicas connected (and online).
func (r *replicaRig) replicas(n string) func() bool {
	return func() bool {
		info, err := r.primary.Client().Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:"+n) && (n == "0" || strings.Contains(info, "state=online"))
	}
}

// cutOff stops the replica and cuts its link: nothing written from now
// on is confirmed.
func (r *replicaRig) cutOff(t *testing.T) {
	t.Helper()
	r.replica.Pause()
	if err := r.primary.Client().ClientKillByFilter(context.Background(), "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the primary has no replica connected", 30*time.Second, r.replicas("0"))
}

// restore lets the replica run and waits until it is linked again.
func (r *replicaRig) restore(t *testing.T) {
	t.Helper()
	r.replica.Resume()
	testkit.Eventually(t, "the replica is back", time.Minute, r.replicas("1"))
}

// conserved fails unless the audit of product 1 counts orders orders,
// none oversold.
func (r *replicaRig) conserved(t *testing.T, orders int) {
	t.Helper()
	a, err := r.svc.Audit(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != orders || a.Oversold() > 0 || !a.Conserved() {
		t.Fatalf("audit: %+v, want %d orders", a, orders)
	}
}
