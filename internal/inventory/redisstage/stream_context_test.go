package redisstage_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// scriptConn counts the script calls written to Redis on its connection
// and, once armed, ends the buy's context (overCtx) right after one was
// written: the deadline then falls while the reply is on its way.
type scriptConn struct {
	net.Conn
	sent *atomic.Int32
	arm  *atomic.Pointer[overCtx]
}

func (c scriptConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if bytes.Contains(bytes.ToLower(p), []byte("evalsha")) || bytes.Contains(bytes.ToLower(p), []byte("\r\neval\r\n")) {
		c.sent.Add(1)
		if o := c.arm.Swap(nil); o != nil {
			o.end()
		}
	}
	return n, err
}

// overCtx is a context whose deadline passes when the test says so (end),
// not at a time: no deadline before, one in the past after.
type overCtx struct {
	context.Context
	once sync.Once
	done chan struct{}
}

func newOverCtx() *overCtx {
	return &overCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *overCtx) end() { c.once.Do(func() { close(c.done) }) }

func (c *overCtx) over() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *overCtx) Deadline() (time.Time, bool) {
	if c.over() {
		return time.Unix(1, 0), true
	}
	return time.Time{}, false
}

func (c *overCtx) Done() <-chan struct{} { return c.done }

func (c *overCtx) Err() error {
	if c.over() {
		return context.DeadlineExceeded
	}
	return nil
}

// TestStreamBuyPastItsContextSendsNothingAndSaysSo: go-redis gives a
// command whose context is already over the context's own error before it
// sends anything (it waits for a pooled connection with the context), and
// a deadline that falls once the command is sent comes back as the
// socket's "i/o timeout" (the app's clients set the connection's
// deadlines from the context). So a redis-stream buy made with a context
// already past its deadline, or cancelled, writes no script call to Redis
// and queues nothing, and must be answered with that context error (503
// timeout or cancelled, "nothing was bought"), not ErrOutcomeUnknown nor
// ErrUnavailable. A deadline that falls after the script was written
// (the reply held back) still leaves the outcome unknown: the script ran
// and queued the order.
func TestStreamBuyPastItsContextSendsNothingAndSaysSo(t *testing.T) {
	r := newContextRig(t)
	// A first buy loads the item's copy, caches the script and dials.
	if err := r.in.Stream.Buy(r.bg, r.order("warm")); err != nil {
		t.Fatalf("first buy: %v", err)
	}
	r.checkPastContexts(t, 1, func(ctx context.Context, user string) error {
		return r.in.Stream.Buy(ctx, r.order(user))
	})
	held := r.hold()
	err := r.in.Stream.Buy(held, r.order("held"))
	r.checkHeld(t, held, err, 2)
}

// TestStreamClaimPastItsContextSendsNothingAndSaysSo is
// TestStreamBuyPastItsContextSendsNothingAndSaysSo for the claim of an
// Idempotency-Key that folds redis-stream's script in (Fold.ClaimFailed):
// a claim whose context was over before it was sent queued nothing and is
// answered with the context's error; one whose deadline fell after it was
// sent may have queued the order, and is answered ErrOutcomeUnknown.
func TestStreamClaimPastItsContextSendsNothingAndSaysSo(t *testing.T) {
	r := newContextRig(t)
	store := idempotency.New(r.rdb, idempotency.Options{Prefix: r.e.NS + ":idem:", Retention: time.Minute})
	claim := func(ctx context.Context, user string) error {
		rc, ok := r.in.Service.RefusalCheck(r.bg, inventory.StageRedisStream,
			inventory.Request{ItemID: r.e.ID, UserID: user, Quantity: 1})
		if !ok || rc.Fold == nil || !store.Checks(rc.Client) {
			t.Fatalf("redis-stream offers no fold for %s", user)
		}
		_, _, err := store.BeginChecked(ctx, user, "/buy", "k-"+user, "fp",
			idempotency.Refusal{Src: rc.Src, Keys: rc.Keys, Args: rc.Args})
		if err == nil {
			return nil
		}
		return rc.Fold.ClaimFailed(err)
	}
	// A first buy loads the item's copy; a first claim caches the script.
	if err := r.in.Stream.Buy(r.bg, r.order("warm")); err != nil {
		t.Fatalf("first buy: %v", err)
	}
	if err := claim(r.bg, "warm-claim"); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	r.checkPastContexts(t, 2, claim)
	held := r.hold()
	err := claim(held, "held")
	r.checkHeld(t, held, err, 3)
}

// contextRig is redis-stream on the shared Redis through a client whose
// connections count the script calls they write (scriptConn).
type contextRig struct {
	e    *streamtest.Env
	in   streamtest.Instance
	rdb  *redis.Client
	bg   context.Context
	sent atomic.Int32
	arm  atomic.Pointer[overCtx]
}

func newContextRig(t *testing.T) *contextRig {
	t.Helper()
	r := &contextRig{bg: context.Background()}
	o := lock.ClientOptions(&redis.Options{Addr: testenv.RedisAddr(t)})
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return scriptConn{Conn: c, sent: &r.sent, arm: &r.arm}, nil
	}
	r.rdb = redis.NewClient(o)
	t.Cleanup(func() { _ = r.rdb.Close() })
	r.e = streamtest.NewEnv(t, testenv.SQLite(t), 10)
	r.e.RDB = r.rdb
	r.in = r.e.Instance("i1", inventory.Lifecycle{})
	return r
}

func (r *contextRig) order(user string) inventory.Order {
	return inventory.Order{No: "O-" + user, ItemID: r.e.ID, UserID: user, Quantity: 1,
		Stage: inventory.StageRedisStream, Instance: "i1", CreatedAt: time.Now()}
}

func (r *contextRig) queued(t *testing.T) int {
	t.Helper()
	n, _, err := r.in.Stream.Backlog(r.bg, r.e.ID)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkPastContexts runs call with a context past its deadline and with
// one cancelled: no script call may reach Redis, the queue must still hold
// queued orders, and the answer must be the context's error alone.
func (r *contextRig) checkPastContexts(t *testing.T, queued int, call func(context.Context, string) error) {
	t.Helper()
	expired, cancel := context.WithDeadline(r.bg, time.Unix(1, 0))
	defer cancel()
	cancelled, cancel2 := context.WithCancel(r.bg)
	cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"past its deadline", expired, context.DeadlineExceeded}, {"cancelled", cancelled, context.Canceled}} {
		before := r.sent.Load()
		err := call(c.ctx, c.name)
		if got := r.sent.Load() - before; got != 0 {
			t.Fatalf("%s: %d script calls reached Redis, want none", c.name, got)
		}
		if n := r.queued(t); n != queued {
			t.Fatalf("%s: %d orders queued, want %d", c.name, n, queued)
		}
		if !errors.Is(err, c.want) || errors.Is(err, inventory.ErrOutcomeUnknown) ||
			errors.Is(err, inventory.ErrUnavailable) || errors.Is(err, idempotency.ErrUnavailable) {
			t.Fatalf("%s: nothing was sent, want %v alone (503 %s), got %v", c.name, c.want, map[error]string{
				context.DeadlineExceeded: "timeout", context.Canceled: "cancelled"}[c.want], err)
		}
	}
}

// hold returns a context that ends right after the next script call is
// written.
func (r *contextRig) hold() *overCtx {
	held := newOverCtx()
	r.arm.Store(held)
	return held
}

// checkHeld checks the answer err of a call whose context ended right
// after its script was written: ErrOutcomeUnknown, and Redis ran the
// script (the queue comes to hold queued orders).
func (r *contextRig) checkHeld(t *testing.T, held *overCtx, err error, queued int) {
	t.Helper()
	if !held.over() {
		t.Fatal("the script was never written")
	}
	if !errors.Is(err, inventory.ErrOutcomeUnknown) {
		t.Fatalf("deadline after the script was sent: want ErrOutcomeUnknown, got %v", err)
	}
	guard, stop := context.WithTimeout(r.bg, time.Minute)
	defer stop()
	for r.queued(t) != queued {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-guard.Done():
			t.Fatal("the held call's order never got queued")
		}
	}
}
