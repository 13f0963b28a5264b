package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// waitCutter loses the answer of the next WAIT pipelined behind a script,
// and only that: the script runs and its reply reaches the client, then
// the read of WAIT's answer fails with a timeout, as it does when the
// request's deadline (or the client's read timeout) falls while WAIT
// waits. Install Dial as the client's dialer.
//
// The WAIT is never sent: an ECHO of a marker takes its place, so that
// every byte before the marker's reply is the script's reply, whole, and
// the read fails right after it, however slow the machine.
type waitCutter struct {
	armed atomic.Int32
	cut   atomic.Int32
}

const cutMarker = "seckill-wait-cut"

var (
	waitCmd     = []byte("*3\r\n$4\r\nWAIT\r\n")
	markerEcho  = []byte(fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(cutMarker), cutMarker))
	markerReply = []byte(fmt.Sprintf("$%d\r\n%s\r\n", len(cutMarker), cutMarker))
)

// arm cuts the next WAIT.
func (w *waitCutter) arm() { w.armed.Store(1) }

func (w *waitCutter) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, w: w}, nil
}

type cutConn struct {
	net.Conn
	w *waitCutter

	mu      sync.Mutex
	cutting bool   // the WAIT was replaced: reads end at the marker
	ahead   []byte // the script's reply, not yet handed to the client
	read    bool   // the script's reply was read from the server
	cut     bool   // and handed over: the read failed
}

func (c *cutConn) Write(p []byte) (int, error) {
	i := bytes.Index(p, waitCmd)
	if i < 0 || !c.w.armed.CompareAndSwap(1, 0) {
		return c.Conn.Write(p)
	}
	c.mu.Lock()
	c.cutting = true
	c.mu.Unlock()
	if _, err := c.Conn.Write(append(append([]byte(nil), p[:i]...), markerEcho...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *cutConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cutting {
		return c.Conn.Read(p)
	}
	if !c.read {
		// Whatever the caller's deadline: the script surely answers.
		_ = c.Conn.SetReadDeadline(time.Time{})
		var got []byte
		buf := make([]byte, 4096)
		for !bytes.Contains(got, markerReply) {
			n, err := c.Conn.Read(buf)
			if err != nil {
				return 0, err
			}
			got = append(got, buf[:n]...)
		}
		c.ahead, c.read = got[:bytes.Index(got, markerReply)], true
	}
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		return n, nil
	}
	if !c.cut {
		c.cut = true
		c.w.cut.Add(1)
		_ = c.Conn.Close()
	}
	return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
}

// TestWaitAnswerLostAfterTheScript: the claim's or settle's script ran
// and its reply came back, but WAIT's answer did not (the request's
// deadline fell while WAIT waited for a lagging replica). Nothing is
// confirmed then, and the store knows what the script did: a claim is
// given back at once (a retaken one stays "tried"), not left in flight
// for its lease with the buyer told "unavailable"; a stored answer found
// is replayed; a settle that stored its answer says ErrNotReplicated.
func TestWaitAnswerLostAfterTheScript(t *testing.T) {
	srv := testenv.StartRedis(t)
	cutter := &waitCutter{}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, Dialer: cutter.Dial})
	t.Cleanup(func() { _ = rdb.Close() })
	plainRDB := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = plainRDB.Close() })
	prefix := testenv.Name("idem") + ":"
	// The server has no replica: WAIT would wait out ReplicaWait, unless
	// its answer is cut first, as it is in every case here.
	waits := idempotency.New(rdb, idempotency.Options{Prefix: prefix, Replicas: 1, ReplicaWait: time.Minute, Lease: time.Hour})
	plain := idempotency.New(plainRDB, idempotency.Options{Prefix: prefix, Lease: time.Hour})
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	claim := func(t *testing.T, key string) *idempotency.Claim {
		t.Helper()
		c, _, err := plain.Begin(ctx, "u", "/p", key, fp)
		if err != nil || c == nil {
			t.Fatalf("claim of %s: %v", key, err)
		}
		return c
	}
	// The scripts are loaded: an EVALSHA answered NOSCRIPT is sent again,
	// and the cut must fall on the pipeline whose script ran.
	if err := plain.Finish(ctx, claim(t, "warm"), idempotency.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	cutBegin := func(t *testing.T, key string) (*idempotency.Claim, *idempotency.Response, error) {
		t.Helper()
		before := cutter.cut.Load()
		cutter.arm()
		c, stored, err := waits.Begin(ctx, "u", "/p", key, fp)
		if cutter.cut.Load() != before+1 {
			t.Fatalf("the WAIT behind the claim of %s was not cut", key)
		}
		return c, stored, err
	}
	givenBack := func(t *testing.T, key string, c *idempotency.Claim, err error) {
		t.Helper()
		var se *idempotency.ScriptError
		if c != nil || !errors.Is(err, idempotency.ErrUnavailable) || !errors.Is(err, idempotency.ErrNotReplicated) || errors.As(err, &se) {
			t.Fatalf("a claim of %s whose WAIT answered nothing: claim %v, %v; want none, ErrUnavailable and ErrNotReplicated (given back: nothing ran), not a *ScriptError (the script may have run)", key, c != nil, err)
		}
	}

	t.Run("a fresh claim is given back", func(t *testing.T) {
		c, _, err := cutBegin(t, "fresh")
		givenBack(t, "fresh", c, err)
		if errors.Is(err, idempotency.ErrTried) {
			t.Fatalf("a key never tried: %v; want no ErrTried", err)
		}
		again, _, err := plain.Begin(ctx, "u", "/p", "fresh", fp)
		if err != nil || again == nil || again.Retaken() {
			t.Fatalf("the retry of fresh: claim %v (retaken %v), %v; want the key free at once", again != nil, again != nil && again.Retaken(), err)
		}
	})

	t.Run("a retaken claim is given back tried", func(t *testing.T) {
		if err := plain.Unknown(ctx, claim(t, "tried")); err != nil {
			t.Fatal(err)
		}
		c, _, err := cutBegin(t, "tried")
		givenBack(t, "tried", c, err)
		if !errors.Is(err, idempotency.ErrTried) {
			t.Fatalf("a key tried before: %v; want ErrTried (its earlier run may have bought)", err)
		}
		again, _, err := plain.Begin(ctx, "u", "/p", "tried", fp)
		if err != nil || again == nil || !again.Retaken() {
			t.Fatalf("the retry of tried: claim %v (retaken %v), %v; want it retaken, still looking for what the first run did", again != nil, again != nil && again.Retaken(), err)
		}
	})

	t.Run("a stored answer is replayed", func(t *testing.T) {
		if err := plain.Finish(ctx, claim(t, "done"), idempotency.Response{Status: 201, Body: []byte("done")}); err != nil {
			t.Fatal(err)
		}
		c, stored, err := cutBegin(t, "done")
		if err != nil || c != nil || stored == nil || string(stored.Body) != "done" {
			t.Fatalf("a key with a stored answer whose WAIT answered nothing: claim %v, stored %v, %v; want the answer replayed", c != nil, stored, err)
		}
	})

	t.Run("a settle that stored its answer is not confirmed", func(t *testing.T) {
		c := claim(t, "settle")
		before := cutter.cut.Load()
		cutter.arm()
		err := waits.Finish(ctx, c, idempotency.Response{Status: 201, Body: []byte("settle")})
		if cutter.cut.Load() != before+1 {
			t.Fatal("the WAIT behind the settle was not cut")
		}
		if !errors.Is(err, idempotency.ErrNotReplicated) {
			t.Fatalf("a Finish whose script stored the answer and whose WAIT answered nothing: %v; want ErrNotReplicated", err)
		}
		_, stored, err := plain.Begin(ctx, "u", "/p", "settle", fp)
		if err != nil || stored == nil || string(stored.Body) != "settle" {
			t.Fatalf("after it: stored %v, %v; want the answer the primary holds", stored, err)
		}
	})
}

// giveBackGate is a Redis hook: while armed, a script sent alone (not in a
// pipeline: the give-back of an unconfirmed claim) says so on entered and
// waits for release before it goes.
type giveBackGate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *giveBackGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *giveBackGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *giveBackGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && g.armed.CompareAndSwap(true, false) {
			g.entered <- struct{}{}
			<-g.release
		}
		return next(ctx, cmd)
	}
}

// TestGiveBackSparesTheNextClaim: an unconfirmed claim is given back, but
// the give-back is held until the claim's lease has run out and another
// request has taken the key over. The give-back must leave that claim be:
// it owns the record now, and its answer is stored and replayed.
func TestGiveBackSparesTheNextClaim(t *testing.T) {
	srv := testenv.StartRedis(t)
	cutter := &waitCutter{}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, Dialer: cutter.Dial})
	t.Cleanup(func() { _ = rdb.Close() })
	gate := &giveBackGate{entered: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(gate)
	plainRDB := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = plainRDB.Close() })
	prefix := testenv.Name("idem") + ":"
	// A lease of a millisecond: it has run out by the time the other
	// request comes.
	waits := idempotency.New(rdb, idempotency.Options{Prefix: prefix, Replicas: 1, ReplicaWait: time.Minute, Lease: time.Millisecond})
	plain := idempotency.New(plainRDB, idempotency.Options{Prefix: prefix, Lease: time.Hour})
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	warm, _, err := plain.Begin(ctx, "u", "/p", "warm", fp)
	if err != nil || warm == nil {
		t.Fatal(err)
	}
	if err := plain.Finish(ctx, warm, idempotency.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}

	gate.armed.Store(true)
	cutter.arm()
	first := make(chan error, 1)
	go func() {
		c, _, err := waits.Begin(ctx, "u", "/p", "k", fp)
		if c != nil {
			err = errors.New("granted")
		}
		first <- err
	}()
	<-gate.entered // the claim ran, its WAIT answer was lost, its give-back waits
	var next *idempotency.Claim
	for next == nil {
		c, _, err := plain.Begin(ctx, "u", "/p", "k", fp)
		switch {
		case errors.Is(err, idempotency.ErrInFlight): // the lease has not run out yet
		case err != nil:
			t.Fatalf("the next claim: %v", err)
		default:
			next = c
		}
	}
	if !next.Retaken() {
		t.Fatal("the next claim took a key that looked never used")
	}
	close(gate.release)
	if err := <-first; !errors.Is(err, idempotency.ErrNotReplicated) {
		t.Fatalf("the first claim: %v, want it given back unconfirmed", err)
	}
	if err := plain.Finish(ctx, next, idempotency.Response{Status: 201, Body: []byte("next")}); err != nil {
		t.Fatal(err)
	}
	_, stored, err := plain.Begin(ctx, "u", "/p", "k", fp)
	if err != nil || stored == nil || string(stored.Body) != "next" {
		t.Fatalf("after the late give-back: stored %v, %v; want the next claim's answer replayed", stored, err)
	}
}
