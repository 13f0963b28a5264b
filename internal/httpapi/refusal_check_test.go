package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	"github.com/seckill-lab/seckill/internal/testenv"
)

// roundTrips counts the commands and pipelines a client sends, and keeps
// the names of the commands until take: with mark set, only of those sent
// under a context that carries the value mark (a buyer's request).
type roundTrips struct {
	n     atomic.Int64
	mark  any
	mu    sync.Mutex
	names []string
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		h.seen(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		h.seen(ctx, cmds...)
		return next(ctx, cmds)
	}
}

func (h *roundTrips) seen(ctx context.Context, cmds ...redis.Cmder) {
	if h.mark != nil && ctx.Value(h.mark) == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		h.names = append(h.names, c.Name())
	}
}

// take returns the names of the commands sent since the last take.
func (h *roundTrips) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := h.names
	h.names = nil
	return names
}

// TestRefusedKeyedBuyIsOneRoundTrip: most of a flash crowd is too late,
// and each late buyer sends an Idempotency-Key. Under redis-atomic, with
// the records on the stage's own Redis, such a buy is refused in the
// claim's script: one round trip, as without a key (it was three: claim,
// reserve, stored answer). The refusal leaves nothing under the key, so
// a retry after a restock buys instead of replaying "sold out", and the
// answers are the stage's own: sold-out, and already-purchased for a
// buyer who has a unit.
func TestRefusedKeyedBuyIsOneRoundTrip(t *testing.T) {
	for _, stageName := range []string{"redis-atomic", "redis-stream"} {
		t.Run(stageName, func(t *testing.T) {
			rdb := testenv.Redis(t)
			count := &roundTrips{}
			rdb.AddHook(count)
			db := testenv.SQLite(t)
			ctx := context.Background()
			if err := db.Products().Reset(ctx, 1, 0); err != nil {
				t.Fatal(err)
			}
			prefix := testenv.Name("refuse")
			redisStock := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
			stage := inventory.Stage(redisStock)
			if stageName == "redis-stream" {
				stage = redisstage.NewRedisStream(redisStock, redisstage.StreamOptions{})
			}
			h := httpapi.NewServer(httpapi.Deps{
				Instance:    "refuse-1",
				Products:    inventory.NewService(db.Products(), map[string]inventory.Stage{stageName: stage}, "refuse-1", "O"),
				Stage:       stageName,
				Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
			})
			if rec := post(h, "warm-key", `{"user_id":"warm","quantity":1}`); rec.Code != http.StatusConflict {
				t.Fatalf("a buyer of nothing: %d %s", rec.Code, rec.Body) // loads the copy and the script
			}

			count.n.Store(0)
			late := post(h, "late-key", `{"user_id":"late","quantity":1}`)
			if late.Code != http.StatusConflict || problemType(t, late) != "sold-out" {
				t.Fatalf("a late buyer with a key: %d %s, want 409 sold-out", late.Code, late.Body)
			}
			if n := count.n.Load(); n != 1 {
				t.Fatalf("a late buyer with a key cost %d round trips to Redis, want 1", n)
			}

			// A restock of two units.
			if err := db.Products().Reset(ctx, 1, 2); err != nil {
				t.Fatal(err)
			}
			if err := redisStock.Reset(ctx, 1, 2); err != nil {
				t.Fatal(err)
			}
			if rec := post(h, "winner-key", `{"user_id":"winner","quantity":1}`); rec.Code != http.StatusCreated && rec.Code != http.StatusAccepted {
				t.Fatalf("a unit: %d %s", rec.Code, rec.Body)
			}
			count.n.Store(0)
			again := post(h, "winner-other-key", `{"user_id":"winner","quantity":1}`)
			if again.Code != http.StatusConflict || problemType(t, again) != "already-purchased" || count.n.Load() != 1 {
				t.Fatalf("the winner with a new key: %d %s in %d round trips, want 409 already-purchased in 1", again.Code, again.Body, count.n.Load())
			}
			// The late buyer's retry with the same key buys the other.
			retry := post(h, "late-key", `{"user_id":"late","quantity":1}`)
			var o api.Order
			if retry.Code != http.StatusCreated && retry.Code != http.StatusAccepted || json.Unmarshal(retry.Body.Bytes(), &o) != nil || o.UserID != "late" {
				t.Fatalf("the late buyer's retry after a restock: %d %s, want its order", retry.Code, retry.Body)
			}
			if replay := post(h, "late-key", `{"user_id":"late","quantity":1}`); replay.Header().Get("Idempotent-Replayed") != "true" || replay.Body.String() != retry.Body.String() {
				t.Fatalf("the bought key replays its order: %d %s", replay.Code, replay.Body)
			}
		})
	}
}

// TestRefusalIsNotStoredWithoutTheCheck: with the records on a Redis of
// their own (as in the demo) there is no check in the claim, and the stage
// refuses; the refusal is not stored either, so both set-ups answer a
// retry after a restock alike.
func TestRefusalIsNotStoredWithoutTheCheck(t *testing.T) {
	rdb := testenv.Redis(t)
	records := testenv.Redis(t) // another client: the store cannot check
	db := testenv.SQLite(t)
	ctx := context.Background()
	if err := db.Products().Reset(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Name("nocheck")
	stage := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
	h := httpapi.NewServer(httpapi.Deps{
		Instance:    "nocheck-1",
		Products:    inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": stage}, "nocheck-1", "O"),
		Stage:       "redis-atomic",
		Idempotency: idempotency.New(records, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
	})
	late := post(h, "late-key", `{"user_id":"late","quantity":1}`)
	if late.Code != http.StatusConflict || problemType(t, late) != "sold-out" {
		t.Fatalf("a late buyer: %d %s, want 409 sold-out", late.Code, late.Body)
	}
	if err := db.Products().Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := stage.Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	if retry := post(h, "late-key", `{"user_id":"late","quantity":1}`); retry.Code != http.StatusCreated {
		t.Fatalf("the retry after a restock: %d %s, want 201", retry.Code, retry.Body)
	}
}

// buyerRequest marks the context of the requests whose commands
// TestKeyedSaleIsTwoRoundTrips counts.
type buyerRequest struct{}

// TestKeyedSaleIsTwoRoundTrips counts what one sale costs in round trips
// to Redis on the buyer's path (the commands its request waits for), with
// the key records on the stage's own Redis. Under redis-atomic a sale
// without a key is the reserve script alone: the confirm (the HDEL of the
// reservation) leaves after the answer, with other sales' (it was on the
// path, a second round trip); with a key it was four (the claim, the
// reserve, the confirm, the stored answer) and is two: the claim's script
// reserves (fold.lua) and the settle's confirms (confirm.lua). Under
// redis-stream the keyed sale was three (claim, enqueue, stored answer)
// and is two. After the sale the reservation is confirmed (redis-atomic)
// or the order queued for the writers (redis-stream), and the key
// replays the order.
func TestKeyedSaleIsTwoRoundTrips(t *testing.T) {
	for _, c := range []struct {
		stage           string
		keyless, keyed  []string
		pending, queued int64 // after the keyed sale
	}{
		{"redis-atomic", []string{"evalsha"}, []string{"evalsha", "evalsha"}, 0, 0},
		{"redis-stream", []string{"evalsha"}, []string{"evalsha", "evalsha"}, 0, 4},
	} {
		t.Run(c.stage, func(t *testing.T) {
			rdb := testenv.Redis(t)
			count := &roundTrips{mark: buyerRequest{}}
			rdb.AddHook(count)
			db := testenv.SQLite(t)
			ctx := context.Background()
			buyer := context.WithValue(ctx, buyerRequest{}, true)
			prefix := testenv.Name("trips")
			redisStock := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
			stage := inventory.Stage(redisStock)
			if c.stage == "redis-stream" {
				stage = redisstage.NewRedisStream(redisStock, redisstage.StreamOptions{})
			}
			if err := db.Products().Reset(ctx, 1, 10); err != nil {
				t.Fatal(err)
			}
			if err := redisStock.Reset(ctx, 1, 10); err != nil {
				t.Fatal(err)
			}
			h := httpapi.NewServer(httpapi.Deps{
				Instance:    "trips-1",
				Products:    inventory.NewService(db.Products(), map[string]inventory.Stage{c.stage: stage}, "trips-1", "O"),
				Stage:       c.stage,
				Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
			})
			// The first sale of each kind loads its scripts (a fresh Redis
			// answers NOSCRIPT first); the counted ones follow.
			for i, sale := range []struct {
				key  string
				want []string
			}{{"warm-key", nil}, {"", nil}, {"", c.keyless}, {"trips-key", c.keyed}} {
				key, want := sale.key, sale.want
				count.take()
				rec := postBy(h, buyer, key, fmt.Sprintf(`{"user_id":"buyer-%d","quantity":1}`, i))
				if rec.Code != http.StatusCreated && rec.Code != http.StatusAccepted {
					t.Fatalf("a sale with key %q: %d %s", key, rec.Code, rec.Body)
				}
				got := count.take()
				if want != nil && fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("a sale with key %q sent %v to Redis, want %v", key, got, want)
				}
			}
			if err := redisStock.WaitConfirms(ctx); err != nil {
				t.Fatal(err)
			}
			pending, err := rdb.HLen(ctx, "seckill:{"+prefix+":1}:pending").Result()
			if err != nil {
				t.Fatal(err)
			}
			queued, err := rdb.HLen(ctx, "seckill:{"+prefix+":1}:queued").Result()
			if err != nil {
				t.Fatal(err)
			}
			if pending != c.pending || queued != c.queued {
				t.Fatalf("after four sales: %d reservations unconfirmed and %d orders queued, want %d and %d", pending, queued, c.pending, c.queued)
			}
			first := post(h, "trips-key", `{"user_id":"buyer-3","quantity":1}`)
			if first.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the keyed sale's retry: %d %s, want its answer replayed", first.Code, first.Body)
			}
		})
	}
}

// TestKeyedRefusalTeachesTheMemory: under redis-atomic behind the crowd
// control, the first keyed buyer of a sold-out item is refused in the
// claim's one script; the instance remembers the sell-out from that
// refusal, so the next keyed buyer costs one plain read (EXISTS). A
// sell-out of a sale that closes is remembered too, and the refusal keeps
// the time left until the closing.
func TestKeyedRefusalTeachesTheMemory(t *testing.T) {
	for _, c := range []struct {
		name   string
		window inventory.SaleWindow
	}{{"no closing", inventory.SaleWindow{}}, {"closing in an hour", inventory.SaleWindow{ClosesAt: time.Now().Add(time.Hour)}}} {
		t.Run(c.name, func(t *testing.T) {
			rdb := testenv.Redis(t)
			trips := &roundTrips{}
			rdb.AddHook(trips)
			db := testenv.SQLite(t)
			ctx := context.Background()
			prefix := testenv.Name("teach")
			stock := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
			var learnt atomic.Int32
			crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{},
				Refused: func(reason string) {
					if reason == admission.RefusedSoldOut {
						learnt.Add(1)
					}
				}})
			svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": crowd.Wrap(stock)}, "teach-1", "O").WithCrowd(crowd)
			if err := svc.ResetSale(ctx, 1, 0, c.window); err != nil {
				t.Fatal(err)
			}
			h := httpapi.NewServer(httpapi.Deps{
				Instance:    "teach-1",
				Products:    svc,
				Stage:       "redis-atomic",
				Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
			})
			// A fresh Redis (the embedded one, for this test alone) answers
			// the first EVALSHA of the claim's script NOSCRIPT, and go-redis
			// sends it again as EVAL. An instance beside this one, with no
			// crowd control (nothing to teach), loads the same script first.
			warm := httpapi.NewServer(httpapi.Deps{
				Instance:    "teach-warm",
				Products:    inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": stock}, "teach-warm", "O"),
				Stage:       "redis-atomic",
				Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
			})
			if rec := post(warm, "k-warm", `{"user_id":"warm"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
				t.Fatalf("the warming buyer: %d %s; want 409 sold-out", rec.Code, rec.Body)
			}
			trips.take()
			first := post(h, "k-1", `{"user_id":"first"}`)
			if got := trips.take(); first.Code != 409 || problemType(t, first) != "sold-out" || fmt.Sprint(got) != "[evalsha]" {
				t.Fatalf("the first keyed buyer: %d %s, sent %v; want 409 sold-out in the claim's one script", first.Code, first.Body, got)
			}
			if learnt.Load() != 1 {
				t.Fatalf("%d refusals counted as the stage's, want 1", learnt.Load())
			}
			next := post(h, "k-2", `{"user_id":"next"}`)
			if got := trips.take(); next.Code != 409 || problemType(t, next) != "sold-out" || fmt.Sprint(got) != "[exists]" {
				t.Fatalf("the next keyed buyer: %d %s, sent %v; want 409 sold-out after [exists]", next.Code, next.Body, got)
			}
		})
	}
}

// TestKeyedBuySoldOutForNowIsOneRoundTrip: while the last units are
// reserved but their orders not yet written (a sale's commit in flight
// under redis-atomic, an accepted order still queued under redis-stream),
// a buyer is told "sold out" and nothing is remembered, since the units
// may still come back. With a key, that refusal is the claim's check's,
// as a sell-out for good is: one round trip, nothing under the key. (It
// was three: the claim took the key, the stage ran its own script and
// heard the same, and the settle gave the key up; in a flash crowd every
// buyer between the last reservation and its commit paid them.) The
// refusal is not remembered: the next buyer asks Redis again, and once the
// reservation is given back, the refused buyer's retry with the same key
// buys it.
func TestKeyedBuySoldOutForNowIsOneRoundTrip(t *testing.T) {
	for _, stageName := range []string{"redis-atomic", "redis-stream"} {
		t.Run(stageName, func(t *testing.T) {
			rdb := testenv.Redis(t)
			trips := &roundTrips{}
			rdb.AddHook(trips)
			db := testenv.SQLite(t)
			ctx := context.Background()
			prefix := testenv.Name("fornow")
			stock := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
			stage := inventory.Stage(stock)
			if stageName == "redis-stream" {
				stage = redisstage.NewRedisStream(stock, redisstage.StreamOptions{})
			}
			crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{}})
			svc := inventory.NewService(db.Products(), map[string]inventory.Stage{stageName: crowd.Wrap(stage)}, "fornow-1", "O").WithCrowd(crowd)
			idem := idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}
			h := httpapi.NewServer(httpapi.Deps{Instance: "fornow-1", Products: svc, Stage: stageName, Idempotency: idempotency.New(rdb, idem)})
			// The claim's script is loaded by a buyer of nothing on an
			// instance without the crowd control (nothing to remember): a
			// fresh Redis answers its first EVALSHA NOSCRIPT.
			warm := httpapi.NewServer(httpapi.Deps{
				Instance:    "fornow-warm",
				Products:    inventory.NewService(db.Products(), map[string]inventory.Stage{stageName: stage}, "fornow-warm", "O"),
				Stage:       stageName,
				Idempotency: idempotency.New(rdb, idem),
			})
			if err := svc.ResetSale(ctx, 1, 0, inventory.SaleWindow{}); err != nil {
				t.Fatal(err)
			}
			if rec := post(warm, "k-warm", `{"user_id":"warm"}`); rec.Code != 409 || problemType(t, rec) != "sold-out" {
				t.Fatalf("the warming buyer: %d %s; want 409 sold-out", rec.Code, rec.Body)
			}
			if err := svc.ResetSale(ctx, 1, 1, inventory.SaleWindow{}); err != nil {
				t.Fatal(err)
			}
			keys := "seckill:{" + prefix + ":1}:"
			if stageName == "redis-stream" {
				// The last unit sold: its order is queued, and no writer
				// runs here to write it.
				if rec := post(h, "", `{"user_id":"first"}`); rec.Code != http.StatusAccepted {
					t.Fatalf("the last unit: %d %s, want 202", rec.Code, rec.Body)
				}
			} else {
				// The last unit reserved by a buyer whose commit has not
				// come back: what reserve.lua leaves behind it.
				if err := rdb.DecrBy(ctx, keys+"stock", 1).Err(); err != nil {
					t.Fatal(err)
				}
				if err := rdb.HSet(ctx, keys+"pending", "O-held", fmt.Sprintf("1|%d|first", time.Now().UnixMilli())).Err(); err != nil {
					t.Fatal(err)
				}
			}

			trips.take()
			late := post(h, "k-late", `{"user_id":"late"}`)
			if got := trips.take(); late.Code != 409 || problemType(t, late) != "sold-out" || fmt.Sprint(got) != "[evalsha]" {
				t.Fatalf("a keyed buyer while the last unit is held: %d %s, sent %v; want 409 sold-out in the claim's one script", late.Code, late.Body, got)
			}
			next := post(h, "k-next", `{"user_id":"next"}`)
			if got := trips.take(); next.Code != 409 || problemType(t, next) != "sold-out" || fmt.Sprint(got) != "[evalsha]" {
				t.Fatalf("the next keyed buyer: %d %s, sent %v; want the claim's script again (a sell-out for now is not remembered)", next.Code, next.Body, got)
			}
			if used, err := idempotency.New(rdb, idem).Used(ctx, "late", "/api/v1/products/1/buy", "k-late"); err != nil || used {
				t.Fatalf("the refused buyer's key: used=%v, %v; want nothing stored under it", used, err)
			}
			if stageName == "redis-stream" {
				return // no writer runs here to write or give back the queued order
			}
			// The held buyer's commit failed, and it gave the unit back.
			if err := rdb.HDel(ctx, keys+"pending", "O-held").Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.IncrBy(ctx, keys+"stock", 1).Err(); err != nil {
				t.Fatal(err)
			}
			retry := post(h, "k-late", `{"user_id":"late"}`)
			var o api.Order
			if retry.Code != http.StatusCreated || json.Unmarshal(retry.Body.Bytes(), &o) != nil || o.UserID != "late" {
				t.Fatalf("the refused buyer's retry after the unit came back: %d %s, want its order", retry.Code, retry.Body)
			}
		})
	}
}
