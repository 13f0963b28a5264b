// Package testkit is the harness the tests share, written once: free
// loopback ports, polling until a condition holds or a server is healthy,
// building cmd/seckill once per test binary and running it, a buffer that
// tolerates concurrent writes, a barrier that forces an interleaving, and a
// dialer that loses a chosen reply, or holds a request back, to order faults,
// a floor on -test.parallel for packages whose tests mostly wait, and the
// process CPU a benchmark's calls cost (ParallelCPU).
// The services the tests need (MySQL, Redis) come from internal/testenv.
package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// pollEvery is how often Poll and Eventually ask: soon enough after the
// condition comes true that a test hardly waits longer than it must, seldom
// enough that the asking (often a Redis or HTTP round trip) is no load on
// what it watches.
const pollEvery = 20 * time.Millisecond

// Poll calls ok every 20 ms until it returns true and reports whether it did
// before limit passed. It is for a test that does more than fail when the
// wait runs out; the others call Eventually.
func Poll(limit time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
	return true
}

// Eventually calls ok every 20 ms until it returns true, and fails the test
// with t.Fatalf, naming what it waited for, when limit passes first. Like
// Fatalf, call it from the test's own goroutine.
func Eventually(t testing.TB, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	if !Poll(limit, ok) {
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
}

// FreePorts finds n free loopback ports. They are released before the
// caller binds them, so they are taken below the kernel's ephemeral range
// (ip_local_port_range): a port the kernel hands out for :0 listeners and
// outgoing connections, thousands of them during a load test, would often
// be taken again before the server binds it. Each test binary starts at its
// own random place and never hands a port out twice, so test binaries
// running side by side rarely meet; when one does, the server fails to
// start and says which port.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for len(ports) < n {
		p, ok := nextPort()
		if !ok {
			t.Fatalf("no free loopback port left below the ephemeral range (found %d of %d)", len(ports), n)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use: try the next
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	for _, l := range ls {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return ports
}

// lowestPort is where FreePorts' range starts: above the well-known and
// most registered service ports a developer's machine may run.
const lowestPort = 10000

var ports struct {
	sync.Mutex
	next, end, left int
}

// nextPort hands out the ports of [lowestPort, ephemeral start) in turn,
// from a random start, once each.
func nextPort() (int, bool) {
	ports.Lock()
	defer ports.Unlock()
	if ports.end == 0 {
		ports.end = ephemeralStart()
		ports.left = ports.end - lowestPort
		ports.next = lowestPort + rand.IntN(ports.left)
	}
	if ports.left == 0 {
		return 0, false
	}
	p := ports.next
	ports.left--
	if ports.next++; ports.next == ports.end {
		ports.next = lowestPort
	}
	return p, true
}

// ephemeralStart reads the first port of the kernel's ephemeral range
// (Linux's default is 32768; other systems use 49152).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > lowestPort+1000 {
			return lo
		}
	}
	return 32768
}

// FreeAddrs is FreePorts as "127.0.0.1:port" addresses.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	for _, p := range FreePorts(t, n) {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return out
}

// WaitHealthy polls url until it answers 200, a value arrives on exited
// (the server stopped; nil means no such signal), or ctx ends.
func WaitHealthy(ctx context.Context, url string, exited <-chan error) error {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			cerr := resp.Body.Close()
			if resp.StatusCode == http.StatusOK && cerr == nil {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("%s: the server exited before it was healthy: %v", url, err)
		case <-ctx.Done():
			return fmt.Errorf("%s: not healthy in time: %w", url, ctx.Err())
		case <-tick.C:
		}
	}
}

var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// Main runs the tests of a package that uses BuildSeckill, removes the
// build, and exits: call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	RemoveBuild()
	os.Exit(code)
}

// RemoveBuild deletes what BuildSeckill built; a TestMain that does more
// than Main calls it after m.Run.
func RemoveBuild() {
	if built.dir != "" {
		if err := os.RemoveAll(built.dir); err != nil {
			fmt.Fprintln(os.Stderr, "removing the test build of seckill:", err)
		}
	}
}

// BuildSeckill builds cmd/seckill once per test binary and returns its
// path. It is built without the race detector even under -race: the
// processes under test stand in for production builds, and an instrumented
// binary would triple their latency on a small machine. GOFLAGS from the
// environment apply (the Makefile sets -tags=nomsgpack).
func BuildSeckill(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "seckill-test-build-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "seckill")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, goTool, "build", "-o", built.path, "github.com/seckill-lab/seckill/cmd/seckill").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build ./cmd/seckill: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// StartProcess runs bin with args and exactly env, waits until every base
// URL in urls answers /healthz, and at cleanup stops it with SIGINT and
// waits for it, so the test also checks that it shuts down cleanly. Its
// output goes to a log that is shown when the test failed.
func StartProcess(t testing.TB, bin string, env, urls []string, args ...string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "process.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(bin)
	if len(args) > 0 {
		name += " " + args[0]
	}
	// The exit is recorded once and seen by closing a channel, so both the
	// wait for health and the cleanup see it, whichever comes first.
	var exitErr error
	gone := make(chan struct{})
	go func() { exitErr = cmd.Wait(); close(gone) }()
	exited := make(chan error, 1)
	go func() { <-gone; exited <- exitErr }()
	t.Cleanup(func() {
		select {
		case <-gone: // it died on its own, and the start already said so
		default:
			stopProcess(t, cmd, name, gone, &exitErr)
		}
		if err := logFile.Close(); err != nil {
			t.Errorf("closing the log: %v", err)
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s log:\n%s", name, b)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, u := range urls {
		if err := WaitHealthy(ctx, u+"/healthz", exited); err != nil {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s: %v\nlog:\n%s", name, err, b)
		}
	}
}

// stopProcess interrupts a running process and waits for it to exit (it
// must exit cleanly), killing it after 15 seconds.
func stopProcess(t testing.TB, cmd *exec.Cmd, name string, gone <-chan struct{}, exitErr *error) {
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Logf("interrupting %s: %v", name, err)
	}
	select {
	case <-gone:
		if *exitErr != nil {
			t.Errorf("%s exited with %v after SIGINT", name, *exitErr)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("%s did not stop within 15s of SIGINT; killing it", name)
		if err := cmd.Process.Kill(); err != nil {
			t.Logf("killing %s: %v", name, err)
		}
		<-gone
	}
}

// SyncBuffer is a bytes.Buffer that a process (or several goroutines) may
// write while the test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Barrier is a cyclic barrier: Wait blocks until n parties have arrived,
// then lets them all go together and starts a new round. A party that waits
// longer than the timeout leaves on its own, so the tail of a run, where
// fewer than n are left, cannot hang the test.
type Barrier struct {
	mu      sync.Mutex
	n, have int
	round   chan struct{}
	timeout time.Duration
}

// NewBarrier returns a barrier for n parties.
func NewBarrier(n int, timeout time.Duration) *Barrier {
	return &Barrier{n: n, round: make(chan struct{}), timeout: timeout}
}

// Wait blocks until n parties are waiting, the timeout passes, or ctx ends.
func (b *Barrier) Wait(ctx context.Context) {
	b.mu.Lock()
	round := b.round
	b.have++
	if b.have == b.n {
		close(round)
		b.round, b.have = make(chan struct{}), 0
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case <-round:
	case <-t.C:
	case <-ctx.Done():
	}
}

// NetFaults breaks the connections it dials at chosen requests. Install
// Dial as the client's dialer (go-redis: Options.Dialer). Each fault is
// armed for a number of requests that match, and used once per request:
//
//   - Drop: the request is sent and runs; the first bytes of the answer are
//     awaited (so it certainly ran), discarded, and the read fails with
//     io.EOF, closing the connection: a server or network that died right
//     after the command.
//   - Delay: the request is held back (the write reports success) and the
//     read fails at once with a timeout, as a read deadline would; the
//     request reaches the server only when Deliver is called: bytes stuck in
//     the network while the client gave up.
type NetFaults struct {
	mu       sync.Mutex
	drop     func(request []byte) bool
	drops    int
	dropped  int
	delay    func(request []byte) bool
	delays   int
	held     []*faultyConn // with a request held back
	heldEver int
}

// Drop makes the next n requests for which match reports true lose their
// replies.
func (d *NetFaults) Drop(n int, match func(request []byte) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drop, d.drops = match, n
}

// Dropped reports how many replies were dropped so far.
func (d *NetFaults) Dropped() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped
}

// Delay holds back the next n requests for which match reports true until
// Deliver.
func (d *NetFaults) Delay(n int, match func(request []byte) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delay, d.delays = match, n
}

// Held reports how many requests were held back so far, delivered or not.
func (d *NetFaults) Held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.heldEver
}

// Deliver sends every request held back to the server, waits for each
// answer (so each has run), discards it and closes its connection.
func (d *NetFaults) Deliver() error {
	d.mu.Lock()
	held := d.held
	d.held = nil
	d.mu.Unlock()
	var errs []error
	for _, c := range held {
		errs = append(errs, c.deliver())
	}
	return errors.Join(errs...)
}

// Dial dials a TCP connection that d can break.
func (d *NetFaults) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &faultyConn{Conn: c, d: d}, nil
}

// fault returns what to do with request: drop its reply, hold it back, or
// neither.
func (d *NetFaults) fault(request []byte) (drop, delay bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.drops > 0 && d.drop != nil && d.drop(request) {
		d.drops--
		return true, false
	}
	if d.delays > 0 && d.delay != nil && d.delay(request) {
		d.delays--
		return false, true
	}
	return false, false
}

type faultyConn struct {
	net.Conn
	d *NetFaults

	mu     sync.Mutex
	drop   bool   // the reply to the request just written is to be lost
	held   []byte // a request held back until Deliver
	closed bool   // closed by the client while a request was held
}

func (c *faultyConn) Write(p []byte) (int, error) {
	drop, delay := c.d.fault(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case delay:
		c.held = append([]byte(nil), p...)
		c.d.mu.Lock()
		c.d.held = append(c.d.held, c)
		c.d.heldEver++
		c.d.mu.Unlock()
		return len(p), nil
	case drop:
		c.drop = true
	}
	return c.Conn.Write(p)
}

var errFaultTimeout error = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

func (c *faultyConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	drop, held := c.drop, c.held != nil
	c.drop = false
	c.mu.Unlock()
	switch {
	case held:
		return 0, errFaultTimeout
	case !drop:
		return c.Conn.Read(p)
	}
	// Wait for the answer, whatever the caller's deadline, so that the
	// request has certainly run, then lose it with the connection.
	_ = c.Conn.SetReadDeadline(time.Time{})
	var buf [512]byte
	_, _ = c.Conn.Read(buf[:])
	_ = c.Conn.Close()
	c.d.mu.Lock()
	c.d.dropped++
	c.d.mu.Unlock()
	return 0, io.EOF
}

// Close keeps a connection with a request held back open for Deliver.
func (c *faultyConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		c.closed = true
		return nil
	}
	return c.Conn.Close()
}

func (c *faultyConn) deliver() error {
	c.mu.Lock()
	held := c.held
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.held = nil
		c.mu.Unlock()
		_ = c.Conn.Close()
	}()
	_ = c.Conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Conn.Write(held); err != nil {
		return fmt.Errorf("deliver a held request: %w", err)
	}
	var buf [512]byte
	if _, err := c.Conn.Read(buf[:]); err != nil {
		return fmt.Errorf("the answer to a held request: %w", err)
	}
	return nil
}
