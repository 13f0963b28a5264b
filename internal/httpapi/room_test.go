package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/ratelimit"
	"github.com/seckill-lab/seckill/internal/room"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// overloadOnce is db-atomic behind a switch: while busy is set, a buy is
// answered 503 overloaded, as a crowded stage would, before it runs.
type overloadOnce struct {
	inventory.Stage
	busy atomic.Bool
}

func (s *overloadOnce) Buy(ctx context.Context, o inventory.Order) error {
	if s.busy.Load() {
		return inventory.ErrOverloaded
	}
	return s.Stage.Buy(ctx, o)
}

// roomFixture is a server whose product 1 has a waiting room.
func roomFixture(t *testing.T) (*fixture, *overloadOnce) {
	t.Helper()
	return roomFixtureLimited(t, nil)
}

// roomFixtureLimited is roomFixture with limit on joins and polls.
func roomFixtureLimited(t *testing.T, limit httpapi.RoomLimit) (*fixture, *overloadOnce) {
	t.Helper()
	db := testenv.SQLite(t)
	rdb := testenv.Redis(t)
	ns := testenv.Name("room")
	stage := &overloadOnce{Stage: inventory.NewDBAtomic(db.Products())}
	keys, _ := room.ParseKeys("k1:0123456789abcdef0123")
	signer, _ := room.NewSigner(keys)
	rooms := room.New(room.Options{RDB: rdb, Signer: signer, Namespace: ns, Step: time.Hour,
		Stock: func(ctx context.Context, id int64) (int, error) {
			it, err := db.Products().Get(ctx, id)
			return it.Stock, err
		}})
	t.Cleanup(rooms.Close)
	t.Cleanup(func() { _ = rooms.Remove(context.Background(), 1) })
	f := &fixture{t: t, db: db, srv: httpapi.NewServer(httpapi.Deps{
		Instance: "test-1", Products: inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": stage}, "test-1", "O"),
		AdminToken: token, Stage: "db-atomic", Rooms: rooms, RoomLimit: limit,
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: ns + ":idem:"}),
	})}
	if rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{"stock":5}`})); rec.Code != http.StatusOK {
		t.Fatalf("reset: %d %s", rec.Code, rec.Body)
	}
	rec := f.do(admin(call{method: "PUT", path: "/api/v1/admin/products/1/room", body: `{"passes_per_second":100000,"max_inside":10}`}))
	if rec.Code != http.StatusOK {
		t.Fatalf("setting the room: %d %s", rec.Code, rec.Body)
	}
	return f, stage
}

// passFor joins user to product 1's room and polls until it has a pass.
func passFor(t *testing.T, f *fixture, user string) string {
	t.Helper()
	rec := f.do(call{method: "POST", path: "/api/v1/products/1/room/join", body: `{"user_id":"` + user + `"}`})
	var tk api.RoomTicket
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &tk) != nil || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("join: %d %s", rec.Code, rec.Body)
	}
	var st api.RoomStatus
	testkit.Eventually(t, "a pass", 10*time.Second, func() bool {
		rec := f.do(call{method: "POST", path: "/api/v1/products/1/room/poll", body: `{"user_id":"` + user + `","ticket":"` + tk.Ticket + `"}`})
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &st) != nil {
			t.Fatalf("poll: %d %s", rec.Code, rec.Body)
		}
		return st.State == room.StateAdmitted
	})
	return st.Pass
}

func buyWith(user, pass, key string) call {
	return call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"` + user + `"}`,
		header: map[string]string{api.PassHeader: pass, "Idempotency-Key": key}}
}

// A buy of an item with a room needs a pass: without one it is refused,
// pointing at the room; a pass buys once, its second use is refused, and
// the same Idempotency-Key replays the first answer.
func TestBuyWithPass(t *testing.T) {
	f, _ := roomFixture(t)
	rec := f.do(buy("alice", 1))
	if got := problemType(t, rec); got != "pass-required" || !strings.Contains(rec.Header().Get("Link"), "/api/v1/products/1/room/join") {
		t.Fatalf("a buy without a pass: %s, Link %q", got, rec.Header().Get("Link"))
	}
	pass := passFor(t, f, "alice")
	first := f.do(buyWith("alice", pass, "k1"))
	if first.Code != http.StatusCreated {
		t.Fatalf("buy with the pass: %d %s", first.Code, first.Body)
	}
	replay := f.do(buyWith("alice", pass, "k1"))
	if replay.Code != http.StatusCreated || replay.Header().Get("Idempotent-Replayed") != "true" || replay.Body.String() != first.Body.String() {
		t.Fatalf("the same key again: %d %s (replayed %q)", replay.Code, replay.Body, replay.Header().Get("Idempotent-Replayed"))
	}
	for _, key := range []string{"k2", ""} {
		if got := problemType(t, f.do(buyWith("alice", pass, key))); got != "pass-spent" {
			t.Fatalf("the pass again with key %q: %s, want pass-spent", key, got)
		}
	}
}

// Tokens that are not the buyer's valid pass are refused with their own
// problem types.
func TestBuyWithBadPass(t *testing.T) {
	f, _ := roomFixture(t)
	pass := passFor(t, f, "alice")
	rec := f.do(call{method: "POST", path: "/api/v1/products/1/room/join", body: `{"user_id":"bob"}`})
	var tk api.RoomTicket
	_ = json.Unmarshal(rec.Body.Bytes(), &tk)
	for name, c := range map[string]struct{ user, pass, want string }{
		"other buyer's":  {"bob", pass, "room-token-wrong-buyer"},
		"forged":         {"alice", pass[:len(pass)-3] + "AAA", "room-token-forged"},
		"ticket as pass": {"bob", tk.Ticket, "room-token-malformed"},
	} {
		if got := problemType(t, f.do(buyWith(c.user, c.pass, ""))); got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
	if got := problemType(t, f.do(call{method: "POST", path: "/api/v1/products/1/room/poll", body: `{"user_id":"alice","ticket":"` + tk.Ticket + `"}`})); got != "room-token-wrong-buyer" {
		t.Errorf("polling another buyer's ticket: %s", got)
	}
	if got := problemType(t, f.do(call{method: "POST", path: "/api/v1/products/2/room/poll", body: `{"user_id":"bob","ticket":"` + tk.Ticket + `"}`})); got != "room-token-wrong-item" {
		t.Errorf("polling a ticket at another item: %s", got)
	}
}

// A pass holder answered 503 keeps its pass: the buy did not run.
func TestPassNotSpentByA503(t *testing.T) {
	f, stage := roomFixture(t)
	pass := passFor(t, f, "alice")
	stage.busy.Store(true)
	if got := problemType(t, f.do(buyWith("alice", pass, "k1"))); got != "overloaded" {
		t.Fatalf("buy while overloaded: %s", got)
	}
	stage.busy.Store(false)
	if rec := f.do(buyWith("alice", pass, "k2")); rec.Code != http.StatusCreated {
		t.Fatalf("the pass after a 503: %d %s", rec.Code, rec.Body)
	}
}

// A sold-out item answers 409 sold-out whatever the pass, and the room
// then answers sold-out to its waiting buyers.
func TestSoldOutRoom(t *testing.T) {
	f, _ := roomFixture(t)
	if rec := f.do(admin(call{method: "PUT", path: "/api/v1/admin/products/1/room", body: `{"passes_per_second":100000,"max_inside":1}`})); rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	pass := passFor(t, f, "alice")
	rec := f.do(call{method: "POST", path: "/api/v1/products/1/room/join", body: `{"user_id":"bob"}`})
	var tk api.RoomTicket
	_ = json.Unmarshal(rec.Body.Bytes(), &tk)
	if rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{"stock":0}`})); rec.Code != http.StatusOK {
		t.Fatal(rec.Body)
	}
	if got := problemType(t, f.do(buyWith("alice", pass, "k1"))); got != "sold-out" {
		t.Fatalf("a pass holder's buy of a sold-out item: %s", got)
	}
	rec = f.do(call{method: "POST", path: "/api/v1/products/1/room/poll", body: `{"user_id":"bob","ticket":"` + tk.Ticket + `"}`})
	var st api.RoomStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.State != room.StateSoldOut {
		t.Fatalf("a waiting buyer's poll after the sell-out: %d %s", rec.Code, rec.Body)
	}
}

// Joins and polls count against the buy's rate limit: one account polling
// harder than the limit is answered 429 rate-limited, with Retry-After.
func TestJoinsAndPollsAreRateLimited(t *testing.T) {
	lim, err := ratelimit.New(testenv.Redis(t), ratelimit.Options{Interval: time.Hour, Burst: 2, Prefix: testenv.Name("roomlimit") + ":"})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := roomFixtureLimited(t, func(ctx context.Context, o inventory.Order) error { return lim.Allow(ctx, "acct:"+o.UserID) })
	rec := f.do(call{method: "POST", path: "/api/v1/products/1/room/join", body: `{"user_id":"scalper"}`})
	var tk api.RoomTicket
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &tk) != nil {
		t.Fatalf("join: %d %s", rec.Code, rec.Body)
	}
	poll := call{method: "POST", path: "/api/v1/products/1/room/poll", body: `{"user_id":"scalper","ticket":"` + tk.Ticket + `"}`}
	if rec := f.do(poll); rec.Code != http.StatusOK {
		t.Fatalf("the first poll: %d %s", rec.Code, rec.Body)
	}
	rec = f.do(poll)
	if got := problemType(t, rec); got != "rate-limited" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a poll past the limit: %s (Retry-After %q)", got, rec.Header().Get("Retry-After"))
	}
	if got := problemType(t, f.do(call{method: "POST", path: "/api/v1/products/1/room/join", body: `{"user_id":"scalper"}`})); got != "rate-limited" {
		t.Fatalf("a join past the limit: %s", got)
	}
}

// The buy that takes the last unit is answered only once the room knows
// it is sold out: a waiting buyer's poll sent after that answer hears
// sold-out (here with the room's steps an hour apart, so nothing else
// could have told it).
func TestLastSaleIsKnownToTheRoomBeforeItsAnswer(t *testing.T) {
	f, _ := roomFixture(t)
	if rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{"stock":1}`})); rec.Code != http.StatusOK {
		t.Fatal(rec.Body)
	}
	if rec := f.do(admin(call{method: "PUT", path: "/api/v1/admin/products/1/room", body: `{"passes_per_second":100000,"max_inside":1}`})); rec.Code != http.StatusOK {
		t.Fatal(rec.Body)
	}
	pass := passFor(t, f, "alice")
	rec := f.do(call{method: "POST", path: "/api/v1/products/1/room/join", body: `{"user_id":"bob"}`})
	var tk api.RoomTicket
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &tk) != nil || tk.State != room.StateWaiting {
		t.Fatalf("bob's join: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(buyWith("alice", pass, "k1")); rec.Code != http.StatusCreated {
		t.Fatalf("the last unit: %d %s", rec.Code, rec.Body)
	}
	rec = f.do(call{method: "POST", path: "/api/v1/products/1/room/poll", body: `{"user_id":"bob","ticket":"` + tk.Ticket + `"}`})
	var st api.RoomStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.State != room.StateSoldOut {
		t.Fatalf("bob's first poll after the last sale: %d %s", rec.Code, rec.Body)
	}
}
