package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/ratelimit"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// crowdSale is a sale under a Redis stage (redis-atomic, or redis-stream
// over its copy) behind a crowd control with the rate limit (admit) and
// the opening draw switched as the case says, on one Redis that rdb's
// hook counts.
type crowdSale struct {
	h      http.Handler
	admits atomic.Int64 // buyers the rate limit was asked about
	limit  atomic.Bool  // the rate limit refuses every buyer
	count  *roundTrips
	stock  *redisstage.RedisAtomic
	rdb    redis.UniversalClient
	prefix string
	last   []string // the commands the last sale's buyer waited for
	// limiter is the real rate limit (redisLimit), on the sale's Redis.
	limiter *ratelimit.Limiter
	limited atomic.Int64 // buyers the crowd counted as rate_limited
	db      *store.DB
}

// The rate limits a crowdSale may run: none, one that answers from
// memory (its state is not the sale's), or the real one (ratelimit), on
// the sale's Redis, wired as cmd/seckill wires it: in the claim's script
// where the crowd can fold it, in its own round trip where not.
const (
	noLimit = iota
	memoryLimit
	redisLimit
	// otherRedisLimit is redisLimit on another client of the server, as
	// a limit the claim's script cannot run (the Cluster's case): it
	// keeps its round trip.
	otherRedisLimit
)

// newCrowdSale returns the sale; draw, when set, sets up its opening draw.
func newCrowdSale(t testing.TB, stage string, limit int, draw func(*admission.DrawOptions)) *crowdSale {
	t.Helper()
	return newCrowdSaleOn(t, testenv.Redis(t), stage, limit, draw)
}

// newCrowdSaleOn is newCrowdSale on rdb.
func newCrowdSaleOn(t testing.TB, rdb redis.UniversalClient, stage string, limit int, draw func(*admission.DrawOptions)) *crowdSale {
	t.Helper()
	s := &crowdSale{count: &roundTrips{mark: buyerRequest{}}, rdb: rdb, prefix: testenv.Name("crowdtrips")}
	rdb.AddHook(s.count)
	db := testenv.SQLite(t)
	s.db = db
	ctx := context.Background()
	s.stock = redisstage.NewRedisAtomic(rdb, db.Products(), s.prefix, nil)
	if err := db.Products().Reset(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.stock.Reset(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	co := admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{}, Refused: func(reason string) {
		if reason == admission.RefusedLimited {
			s.limited.Add(1)
		}
	}}
	switch limit {
	case memoryLimit:
		// The limiter's own state is not the sale's: this one answers
		// from memory, so every command counted is the sale's.
		co.Admit = func(context.Context, inventory.Order) error {
			s.admits.Add(1)
			if s.limit.Load() {
				return &ratelimit.Limited{Key: "acct:test", Wait: time.Second}
			}
			return nil
		}
	case redisLimit:
		s.withRedisLimit(t, &co, rdb)
	case otherRedisLimit:
		other := redis.NewClient(rdb.(*redis.Client).Options())
		t.Cleanup(func() {
			if err := other.Close(); err != nil {
				t.Error(err)
			}
		})
		s.withRedisLimit(t, &co, other)
	}
	if draw != nil {
		o := admission.DrawOptions{
			Span:   func() time.Duration { return time.Second },
			RefNow: func(context.Context) (time.Time, error) { return time.Now(), nil },
		}
		draw(&o)
		co.Draw = admission.NewDraw(o)
	}
	crowd := admission.NewCrowd(co)
	st := inventory.Stage(s.stock)
	if stage == inventory.StageRedisStream {
		st = redisstage.NewRedisStream(s.stock, redisstage.StreamOptions{})
	}
	s.h = httpapi.NewServer(httpapi.Deps{
		Instance:    "crowdtrips-1",
		Products:    inventory.NewService(db.Products(), map[string]inventory.Stage{stage: crowd.Wrap(st)}, "crowdtrips-1", "O"),
		Stage:       stage,
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: s.prefix + ":idem:", Lease: time.Hour}),
	})
	return s
}

// withRedisLimit limits every account to one buy an hour, in Redis, on
// its client rdb.
func (s *crowdSale) withRedisLimit(t testing.TB, co *admission.CrowdOptions, rdb redis.UniversalClient) {
	l, err := ratelimit.New(rdb, ratelimit.Options{Interval: time.Hour, Burst: 1, Prefix: s.prefix + ":rate:"})
	if err != nil {
		t.Fatal(err)
	}
	s.limiter = l
	co.Admit = func(ctx context.Context, o inventory.Order) error {
		s.admits.Add(1)
		return l.Allow(ctx, "acct:"+o.UserID)
	}
	co.AdmitInScript = func(ctx context.Context, o inventory.Order) (inventory.ScriptGate, bool) {
		g := l.Gate("acct:" + o.UserID)
		return inventory.ScriptGate{Client: rdb, Src: g.Src, Keys: g.Keys, Args: g.Args, Refused: g.Refused}, true
	}
}

// sale posts one buy and returns how many round trips it sent to Redis.
func (s *crowdSale) sale(t testing.TB, key, user string, want int) int {
	t.Helper()
	s.count.take()
	// Only the commands sent under the buyer's request are counted: a
	// confirm sent after the answer, by the stage's own sender, is not on
	// the buyer's path.
	buyer := context.WithValue(context.Background(), buyerRequest{}, true)
	rec := postBy(s.h, buyer, key, fmt.Sprintf(`{"user_id":%q,"quantity":1}`, user))
	if rec.Code == http.StatusAccepted && want == http.StatusCreated {
		rec.Code = want // redis-stream's order, queued
	}
	if rec.Code != want {
		t.Fatalf("a sale with key %q: %d %s, want %d", key, rec.Code, rec.Body, want)
	}
	s.last = s.count.take()
	return len(s.last)
}

// TestSaleRoundTrips counts the Redis round trips on a buyer's path of a
// redis-atomic sale, the item loaded, with the rate limit and the opening
// draw on and off: a keyed sale is at most 2 (the claim takes the unit,
// the settle confirms it and stores the answer), and the gates are asked
// once per buyer. Before, a crowd with the limit or the draw on did not
// fold the claim, and a keyed sale was 4 (claim, reserve, confirm,
// settle).
//
// A keyless sale is 1: the reservation script; redis-atomic's confirm
// leaves after the answer, batched with its group's (issue 61, point 3),
// and redis-stream's writers confirm.
func TestSaleRoundTrips(t *testing.T) {
	for _, c := range []struct {
		name          string
		stage         string
		limit, draw   bool
		keyless, keye int
	}{
		{"no crowd gates", inventory.StageRedisAtomic, false, false, 1, 2},
		{"rate limit", inventory.StageRedisAtomic, true, false, 1, 2},
		{"opening draw", inventory.StageRedisAtomic, false, true, 1, 2},
		{"rate limit and draw", inventory.StageRedisAtomic, true, true, 1, 2},
		{"redis-stream, no crowd gates", inventory.StageRedisStream, false, false, 1, 2},
		{"redis-stream, rate limit and draw", inventory.StageRedisStream, true, true, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var draw func(*admission.DrawOptions)
			if c.draw {
				// An opening an hour ago: past the draw's two spans, no
				// buyer is held, but every one is asked about (the
				// opening is learnt once under the epoch, on Redis's
				// clock, by the warm-up sale).
				opens := time.Now().Add(-time.Hour)
				draw = func(o *admission.DrawOptions) {
					o.Opening = func(context.Context, int64) (time.Time, error) { return opens, nil }
				}
			}
			s := newCrowdSale(t, c.stage, map[bool]int{false: noLimit, true: memoryLimit}[c.limit], draw)
			// The first sales load the scripts (a fresh Redis answers
			// NOSCRIPT first) and learn the draw's opening; the counted
			// ones follow.
			s.sale(t, "warm-key", "warm-1", http.StatusCreated)
			s.sale(t, "", "warm-2", http.StatusCreated)
			admits := s.admits.Load()
			if n := s.sale(t, "", "keyless", http.StatusCreated); n > c.keyless || n < 1 {
				t.Errorf("a keyless sale: %d round trips (%v), want 1 to %d", n, s.last, c.keyless)
			}
			if n := s.sale(t, "trips-key", "keyed", http.StatusCreated); n > c.keye || n < 1 {
				t.Errorf("a keyed sale: %d round trips (%v), want 1 to %d", n, s.last, c.keye)
			}
			if c.limit {
				if got := s.admits.Load() - admits; got != 2 {
					t.Errorf("the rate limit was asked %d times for 2 buyers, want once each", got)
				}
			}
			if rec := post(s.h, "trips-key", `{"user_id":"keyed","quantity":1}`); rec.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the keyed sale's retry: %d %s, want its answer replayed", rec.Code, rec.Body)
			}
		})
	}
}

// TestLimitedKeyedBuyTakesNothing: with the rate limit asked before the
// claim, a keyed buyer it turns away hears 429 and nothing is taken: the
// stock is whole, the key is free, and the same key buys once the limit
// lets it. A key already used is still replayed while the limit refuses:
// the claim, not the gate, answers for it.
func TestLimitedKeyedBuyTakesNothing(t *testing.T) {
	s := newCrowdSale(t, inventory.StageRedisAtomic, memoryLimit, nil)
	ctx := context.Background()
	s.sale(t, "done-key", "done", http.StatusCreated)
	s.limit.Store(true)
	s.sale(t, "limited-key", "limited", http.StatusTooManyRequests)
	left, err := s.rdb.Get(ctx, "seckill:{"+s.prefix+":1}:stock").Int()
	if err != nil {
		t.Fatal(err)
	}
	if left != 9 {
		t.Fatalf("after a sale and a limited buyer: %d left in Redis, want 9", left)
	}
	if rec := post(s.h, "done-key", `{"user_id":"done","quantity":1}`); rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a used key while the limit refuses: %d %s, want its 201 replayed", rec.Code, rec.Body)
	}
	s.limit.Store(false)
	s.sale(t, "limited-key", "limited", http.StatusCreated)
}

// TestDrawHoldsAKeyedBuyerBeforeItsClaim: at an opening, the draw holds a
// keyed buyer before its claim is sent, so the claim that folds the
// stage's script takes no unit while the buyer is held; let go, it buys.
func TestDrawHoldsAKeyedBuyerBeforeItsClaim(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	opens := time.Now()
	s := newCrowdSale(t, inventory.StageRedisAtomic, noLimit, func(o *admission.DrawOptions) {
		o.Opening = func(context.Context, int64) (time.Time, error) { return opens, nil }
		o.Sleep = func(ctx context.Context, _ time.Duration) error {
			close(held)
			<-release
			return nil
		}
	})
	done := make(chan int)
	go func() {
		done <- post(s.h, "drawn-key", `{"user_id":"drawn","quantity":1}`).Code
	}()
	<-held
	left, err := s.rdb.Get(context.Background(), "seckill:{"+s.prefix+":1}:stock").Int()
	if err != nil {
		t.Fatal(err)
	}
	if left != 10 {
		t.Errorf("while the draw holds the buyer: %d left in Redis, want 10 (no unit taken)", left)
	}
	close(release)
	if code := <-done; code != http.StatusCreated {
		t.Fatalf("the buyer let go by the draw: %d, want 201", code)
	}
}

// TestSaleRoundTripsRealLimit counts a sale's round trips with the real
// rate limit (ratelimit, on the sale's one Redis server): a keyed sale is
// still at most 2, since the limit runs in the claim's script, before it
// takes the unit; before, the limit was a round trip of its own in front
// of the claim, and a keyed sale was 3. The limit still counts every
// buyer: each account's state is in Redis after its sale. A keyless sale
// asks the limit in its own round trip (limit and reserve: 2).
func TestSaleRoundTripsRealLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		stage string
		draw  bool
	}{
		{"redis-atomic", inventory.StageRedisAtomic, false},
		{"redis-atomic, opening draw", inventory.StageRedisAtomic, true},
		{"redis-stream", inventory.StageRedisStream, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var draw func(*admission.DrawOptions)
			if c.draw {
				opens := time.Now().Add(-time.Hour)
				draw = func(o *admission.DrawOptions) {
					o.Opening = func(context.Context, int64) (time.Time, error) { return opens, nil }
				}
			}
			s := newCrowdSale(t, c.stage, redisLimit, draw)
			s.sale(t, "warm-key", "warm-1", http.StatusCreated)
			s.sale(t, "", "warm-2", http.StatusCreated)
			if n := s.sale(t, "", "keyless", http.StatusCreated); n > 2 || n < 1 {
				t.Errorf("a keyless sale: %d round trips (%v), want 1 to 2", n, s.last)
			}
			if n := s.sale(t, "trips-key", "keyed", http.StatusCreated); n > 2 || n < 1 {
				t.Errorf("a keyed sale: %d round trips (%v), want 1 to 2", n, s.last)
			}
			for _, user := range []string{"keyless", "keyed"} {
				if n, err := s.rdb.Exists(context.Background(), s.prefix+":rate:acct:"+user).Result(); err != nil || n != 1 {
					t.Errorf("the limit's state of %s after its sale: %d, %v; want it counted", user, n, err)
				}
			}
			if rec := post(s.h, "trips-key", `{"user_id":"keyed","quantity":1}`); rec.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the keyed sale's retry: %d %s, want its answer replayed", rec.Code, rec.Body)
			}
		})
	}
}

// TestRealLimitKeyedBuyTakesNothing: a keyed buyer the real limit turns
// away in the claim's script hears the limiter's 429 (its problem type,
// Retry-After), counted as rate_limited, in one round trip; nothing is
// taken (the stock is whole) and the key stays free, so that the same
// key buys once the limit lets it. A used key is still replayed while the
// limit refuses.
func TestRealLimitKeyedBuyTakesNothing(t *testing.T) {
	s := newCrowdSale(t, inventory.StageRedisAtomic, redisLimit, nil)
	ctx := context.Background()
	s.sale(t, "done-key", "done", http.StatusCreated)
	// The limited buyer has sent its one request of the hour.
	if err := s.limiter.Allow(ctx, "acct:limited"); err != nil {
		t.Fatal(err)
	}
	limited := s.limited.Load()
	if n := s.sale(t, "limited-key", "limited", http.StatusTooManyRequests); n != 1 {
		t.Errorf("a limited keyed buyer: %d round trips (%v), want 1", n, s.last)
	}
	if got := s.limited.Load() - limited; got != 1 {
		t.Errorf("limited buyers counted: %d, want 1", got)
	}
	left, err := s.rdb.Get(ctx, "seckill:{"+s.prefix+":1}:stock").Int()
	if err != nil {
		t.Fatal(err)
	}
	if left != 9 {
		t.Fatalf("after a sale and a limited buyer: %d left in Redis, want 9", left)
	}
	rec := post(s.h, "other-key", `{"user_id":"limited","quantity":1}`)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "rate-limited") {
		t.Fatalf("a limited buyer: %d %v %s, want the limiter's 429 with Retry-After", rec.Code, rec.Header(), rec.Body)
	}
	if rec := post(s.h, "done-key", `{"user_id":"done","quantity":1}`); rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a used key while the limit refuses: %d %s, want its 201 replayed", rec.Code, rec.Body)
	}
	if err := s.rdb.Del(ctx, s.prefix+":rate:acct:limited").Err(); err != nil {
		t.Fatal(err)
	}
	s.sale(t, "limited-key", "limited", http.StatusCreated)
}

// TestRealLimitKeepsItsRoundTripWhereItCannotFold: a limit whose Redis
// the claim's script cannot reach (another client here; a Cluster, whose
// rate keys are not in the item's slot, in production) is asked in its
// own round trip before the claim, as before, and still limits: a
// limited keyed buyer hears 429 and takes nothing.
func TestRealLimitKeepsItsRoundTripWhereItCannotFold(t *testing.T) {
	s := newCrowdSale(t, inventory.StageRedisAtomic, otherRedisLimit, nil)
	ctx := context.Background()
	s.sale(t, "warm-key", "warm", http.StatusCreated)
	admits := s.admits.Load()
	s.sale(t, "done-key", "done", http.StatusCreated)
	if got := s.admits.Load() - admits; got != 1 {
		t.Errorf("the limit was asked %d times in its own round trip for a keyed buyer, want 1", got)
	}
	if err := s.limiter.Allow(ctx, "acct:limited"); err != nil {
		t.Fatal(err)
	}
	rec := post(s.h, "limited-key", `{"user_id":"limited","quantity":1}`)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a limited keyed buyer: %d %s, want 429 with Retry-After", rec.Code, rec.Body)
	}
	left, err := s.rdb.Get(ctx, "seckill:{"+s.prefix+":1}:stock").Int()
	if err != nil {
		t.Fatal(err)
	}
	if left != 8 {
		t.Fatalf("after two sales and a limited buyer: %d left in Redis, want 8", left)
	}
}

// TestRealLimitCountsAHeldBuyerOnArrival: at an opening, a keyed buyer
// the draw holds is counted by the real limit before the hold, as
// without the fold, not in its claim's script once let go (a scalper's
// burst, let go at random across the draw, would be spread out for the
// limit to let through). A buyer over the limit is not held at all.
func TestRealLimitCountsAHeldBuyerOnArrival(t *testing.T) {
	var counted atomic.Int64 // -1: held before the limit counted the buyer
	held, release := make(chan struct{}), make(chan struct{})
	opens := time.Now()
	var s *crowdSale
	s = newCrowdSale(t, inventory.StageRedisAtomic, redisLimit, func(o *admission.DrawOptions) {
		o.Opening = func(context.Context, int64) (time.Time, error) { return opens, nil }
		o.Sleep = func(ctx context.Context, _ time.Duration) error {
			n, err := s.rdb.Exists(ctx, s.prefix+":rate:acct:drawn").Result()
			if err != nil {
				t.Error(err)
			}
			counted.Store(n - 1)
			close(held)
			<-release
			return nil
		}
	})
	done := make(chan int)
	go func() {
		done <- post(s.h, "drawn-key", `{"user_id":"drawn","quantity":1}`).Code
	}()
	<-held
	if counted.Load() != 0 {
		t.Error("the draw held the buyer before the limit counted it")
	}
	close(release)
	if code := <-done; code != http.StatusCreated {
		t.Fatalf("the buyer let go by the draw: %d, want 201", code)
	}
	// Over its limit now: refused before any hold (Sleep would close
	// held again and panic).
	if rec := post(s.h, "again-key", `{"user_id":"drawn","quantity":1}`); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("the same buyer again, over its limit: %d %s, want 429", rec.Code, rec.Body)
	}
}

// TestRealLimitOnACluster: on a Cluster, where the rate keys are not in
// the item's slot, the claim folds nothing and the limit keeps its round
// trip before the buy: it is asked once per keyed buyer, and a limited
// keyed buyer hears 429 and takes nothing.
func TestRealLimitOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.StartRedisCluster(t), MaxRetries: -1})
	t.Cleanup(func() {
		if err := cc.Close(); err != nil {
			t.Error(err)
		}
	})
	s := newCrowdSaleOn(t, cc, inventory.StageRedisAtomic, redisLimit, nil)
	ctx := context.Background()
	admits := s.admits.Load()
	s.sale(t, "done-key", "done", http.StatusCreated)
	if got := s.admits.Load() - admits; got != 1 {
		t.Errorf("the limit was asked %d times for a keyed buyer, want once, in its own round trip", got)
	}
	if err := s.limiter.Allow(ctx, "acct:limited"); err != nil {
		t.Fatal(err)
	}
	rec := post(s.h, "limited-key", `{"user_id":"limited","quantity":1}`)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a limited keyed buyer on a Cluster: %d %s, want 429 with Retry-After", rec.Code, rec.Body)
	}
	left, err := cc.Get(ctx, "seckill:{"+s.prefix+":1}:stock").Int()
	if err != nil {
		t.Fatal(err)
	}
	if left != 9 {
		t.Fatalf("after a sale and a limited buyer: %d left, want 9", left)
	}
}

// BenchmarkKeyedSaleRealLimit: a keyed redis-atomic sale with the real
// rate limit on, the limit in its own round trip before the claim (as on
// a Cluster) and in the claim's script (one server), each sale a new
// buyer and key. Compare the two within one run (-count, interleaved).
func BenchmarkKeyedSaleRealLimit(b *testing.B) {
	for _, c := range []struct {
		name  string
		limit int
	}{{"own round trip", otherRedisLimit}, {"in the claim", redisLimit}} {
		b.Run(c.name, func(b *testing.B) {
			s := newCrowdSale(b, inventory.StageRedisAtomic, c.limit, nil)
			ctx := context.Background()
			if err := s.db.Products().Reset(ctx, 1, b.N+1); err != nil {
				b.Fatal(err)
			}
			if err := s.stock.Reset(ctx, 1, b.N+1); err != nil {
				b.Fatal(err)
			}
			s.sale(b, "warm", "warm", http.StatusCreated)
			b.ResetTimer()
			for i := range b.N {
				s.sale(b, fmt.Sprintf("k%d", i), fmt.Sprintf("u%d", i), http.StatusCreated)
			}
		})
	}
}
