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
	ctx := context.Background()
	db := testenv.SQLite(t)
	if err := db.Products().Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	primary, replica := testenv.StartReplicaPair(t)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	kind := testenv.Name("idemrepl")
	stock := inventory.NewRedisAtomic(rdb, db.Products(), kind, nil)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": stock}, "repl-1", "O")
	// WAIT answers as soon as the replica confirms; the bound only covers
	// a replica slowed by CPU hogs, and is waited out where none can.
	idem := idempotency.New(rdb, idempotency.Options{Prefix: kind + ":idem:", Replicas: 1, ReplicaWait: 5 * time.Second})
	if !idem.Checks(rdb) {
		t.Fatal("the store must keep its records on the stage's Redis, where the claim can take the unit")
	}
	h := httpapi.NewServer(httpapi.Deps{Instance: "repl-1", Products: svc, Stage: "redis-atomic", Idempotency: idem, RequestTimeout: time.Minute})

	// The Redis copy is loaded (a buy of more than the stock).
	want409(t, "warm", post(h, "warm", `{"user_id":"warm","quantity":2}`), "sold-out")

	replica.Pause()
	if err := primary.Client().ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	replicas := func(n string) func() bool {
		return func() bool {
			info, err := primary.Client().Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "connected_slaves:"+n) && (n == "0" || strings.Contains(info, "state=online"))
		}
	}
	testkit.Eventually(t, "the primary has no replica connected", 30*time.Second, replicas("0"))

	body := `{"user_id":"alice","quantity":1}`
	first := post(h, "alice-key", body)
	if first.Code != http.StatusServiceUnavailable {
		t.Fatalf("a keyed buy whose claim no replica confirmed: %d %s, want 503", first.Code, first.Body)
	}
	if _, err := db.Products().OrderOf(ctx, 1, "alice"); err == nil {
		t.Fatalf("the buy ran under a claim no replica confirmed (answered %s)", first.Body)
	}

	replica.Resume()
	testkit.Eventually(t, "the replica is back", time.Minute, replicas("1"))
	retry := post(h, "alice-key", body)
	if retry.Code != http.StatusCreated {
		t.Fatalf("the retry once the replica is back: %d %s, want the unit bought (201); the first try heard %d %s", retry.Code, retry.Body, first.Code, first.Body)
	}
	o := orderOf(t, retry)
	if o.UserID != "alice" {
		t.Fatalf("the retry's order: %+v", o)
	}
	a, err := svc.Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != 1 || a.Oversold() > 0 || !a.Conserved() {
		t.Fatalf("audit: %+v", a)
	}
}
