package httpapi_test

import (
	"bytes"
	"context"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// settleHold holds Redis's answer to the command that marks a key tried
// (idempotency.Store.Unknown), as a Redis that stopped answering would:
// until release, or until the read deadline go-redis set for it passes.
type settleHold struct {
	holding atomic.Int32 // answers held now
	release chan struct{}
	once    sync.Once
}

func (h *settleHold) unblock() { h.once.Do(func() { close(h.release) }) }

func (h *settleHold) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &settleHeldConn{Conn: c, h: h}, nil
}

type settleHeldConn struct {
	net.Conn
	h        *settleHold
	mu       sync.Mutex
	deadline time.Time
	hold     bool
}

func (c *settleHeldConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *settleHeldConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *settleHeldConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(`"tried":true`)) {
		c.mu.Lock()
		c.hold = true
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *settleHeldConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	hold, deadline := c.hold, c.deadline
	c.hold = false
	c.mu.Unlock()
	if hold {
		c.h.holding.Add(1)
		var expired <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-c.h.release:
			c.h.holding.Add(-1)
		case <-expired:
			c.h.holding.Add(-1)
			return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}
	}
	return c.Conn.Read(b)
}

// TestKeySettleDoesNotHoldTheAnswerPastTheDeadline: a keyed buy whose
// deadline passed after its commit is answered 503 timeout, and its key
// is marked tried so that the retry finds the order. When Redis stops
// answering that mark, the buyer must still hear the 503 at its deadline
// (and a short grace), not wait for the mark's own budget: on serve, with
// Redis SIGSTOPped, keyed buys under a 4 s deadline were answered after
// 6.1 s. The mark still lands once Redis answers, and the retry gets the
// order.
func TestKeySettleDoesNotHoldTheAnswerPastTheDeadline(t *testing.T) {
	db := testenv.SQLite(t)
	ctx := context.Background()
	if err := db.Products().Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	hold := &settleHold{release: make(chan struct{})}
	t.Cleanup(hold.unblock)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), Dialer: hold.dial})
	t.Cleanup(func() { _ = rdb.Close() })
	var cut atomic.Pointer[testkit.CueDeadline]
	cue := testkit.NewCueDeadline()
	cut.Store(cue)
	stages := map[string]inventory.Stage{"db-atomic": lostAnswerStage{next: inventory.NewDBAtomic(db.Products()), cut: &cut}}
	h := httpapi.NewServer(httpapi.Deps{
		Instance:       "settle-1",
		Products:       inventory.NewService(db.Products(), stages, "settle-1", "O"),
		Stage:          "db-atomic",
		RequestTimeout: time.Minute, // the first buy's deadline passes on cue
		Idempotency:    idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("idem") + ":", Lease: time.Hour}),
	})
	body := `{"user_id":"settle-buyer","quantity":1}`

	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- postBy(h, cue, "settle-key", body) }()
	var first *httptest.ResponseRecorder
	select {
	case first = <-answered:
	case <-time.After(time.Minute):
		t.Fatal("the first buy was never answered")
	}
	if first.Code != 503 || problemType(t, first) != "timeout" {
		t.Fatalf("the first buy: %d %s, want 503 timeout", first.Code, first.Body)
	}
	if hold.holding.Load() == 0 {
		t.Fatal("the buyer heard its 503 only once the key's settle had given up on a Redis that did not answer: the answer waited past the request's deadline")
	}
	held, err := db.Products().OrderOf(ctx, 1, "settle-buyer")
	if err != nil {
		t.Fatalf("the first buy's commit did not land: %v", err)
	}
	cut.Store(nil)

	// Redis answers again: the key's mark lands, and the retry (told
	// "in flight" until then) finds the order.
	hold.unblock()
	var retry *httptest.ResponseRecorder
	testkit.Eventually(t, "the retry gets the first run's order", 30*time.Second, func() bool {
		retry = post(h, "settle-key", body)
		return retry.Code != 409 || !strings.Contains(retry.Body.String(), "idempotency-in-flight")
	})
	wantOrder(t, "the retry", retry, held.No)
}
