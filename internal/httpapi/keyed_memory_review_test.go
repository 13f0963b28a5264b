package httpapi_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
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
			stock := inventory.NewRedisAtomic(rdb, db.Products(), prefix, nil)
			var stage inventory.Stage = stock
			if c.stage == "redis-stream" {
				stage = inventory.NewRedisStream(stock, inventory.StreamOptions{})
			}
			co := inventory.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{}}
			if !c.fold {
				co.Admit = func(context.Context, inventory.Order) error { return nil }
			}
			crowd := inventory.NewCrowd(co)
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
