package chaos

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Frames of toxiproxy v2.5.0's latency toxic (toxics/latency.go): the
// select in which it sleeps with a chunk, and the send after that sleep.
const (
	latencyHolding = "/toxics/latency.go:41"
	latencySending = "/toxics/latency.go:44"
)

// waitFor waits for a state of the goroutines. It fails the test after two
// minutes (or near its deadline): a state that never comes is a barrier
// that broke, and waiting longer only hides which.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(2 * time.Minute)
	if dl, ok := t.Deadline(); ok && dl.Add(-10*time.Second).Before(limit) {
		limit = dl.Add(-10 * time.Second)
	}
	for !cond() {
		if time.Now().After(limit) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// strandProxy is a toxiproxy proxy of its own in front of a listener the
// test accepts upstream connections from; both close when the test ends.
func strandProxy(t *testing.T, name string) (*toxiproxy.Proxy, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	p := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()), name, "127.0.0.1:0", ln.Addr().String())
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p, ln
}

// connect opens a client connection through p and accepts the proxy's
// connection to the upstream on ln.
func connect(t *testing.T, p *toxiproxy.Proxy, ln net.Listener) (client, upstream net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", p.Listen)
	if err != nil {
		t.Fatal(err)
	}
	up, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c, up
}

// atFrame reports whether a goroutine's stack has a frame at file:line
// (a frame with an offset is followed by a space, an inlined one by the
// end of the line).
func atFrame(g, fileLine string) bool {
	return strings.Contains(g, fileLine+" ") || strings.Contains(g+"\n", fileLine+"\n")
}

// goroutines dumps every goroutine's stack, by goroutine id.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
		all[id] = g
	}
	return all
}

// holders returns the ids of the goroutines that hold a chunk in a
// latency toxic, and whether any link still copies its output to a client.
func holders() (ids map[string]bool, writers bool) {
	ids = map[string]bool{}
	for id, g := range goroutines() {
		if atFrame(g, latencyHolding) {
			ids[id] = true
		}
		writers = writers || strings.Contains(g, "(*ToxicLink).write(")
	}
	return ids, writers
}

// TestToxiproxyLatencyStrandsAGoroutine pins the upstream defect that
// TestMain's one goleak exception is for. When the client of a link goes
// away while the latency toxic still holds chunks for it, the link's writer
// fails and exits, and the toxic then blocks for ever handing the next
// chunk to a channel nobody reads; Proxy.Stop does not end it.
// TestRedisLatency meets this whenever an instance closes a Redis
// connection (a timeout, a shutdown) with answers still delayed on the
// wire. v2.5.0 is the newest toxiproxy the module proxy serves, and the
// toxic is unchanged on upstream's main (f48fd7f). If this test fails
// because nothing was stranded, the defect is gone: drop the exception in
// main_test.go with this test.
func TestToxiproxyLatencyStrandsAGoroutine(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite; skipped with -short")
	}
	p, ln := strandProxy(t, "strand")
	// Two latency toxics in a row on the answers: the first holds a chunk
	// half a second, the second two seconds more. Which goroutine holds a
	// chunk shows in a goroutine dump, so the steps below wait for states,
	// not for times.
	for _, body := range []string{
		`{"name":"first","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":500}}`,
		`{"name":"second","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":2000}}`,
	} {
		if _, err := p.Toxics.AddToxicJson(bytes.NewReader([]byte(body))); err != nil {
			t.Fatal(err)
		}
	}
	// One try: the upstream answers A. Once the first toxic has passed A
	// to the second (another goroutine holds it), the upstream answers B,
	// and once the first holds B too, the client resets its connection,
	// having received nothing. A's delivery fails, the link's writer
	// exits, and B is handed to nobody. A try is void if A reached the
	// client first (the machine stalled for about two seconds): then it is
	// made again.
	var first, second string // the goroutines of the two toxics
	try := func() (void bool) {
		c, up := connect(t, p, ln)
		defer up.Close()
		// arrived: did anything reach the client? (A deadline already
		// past would fail the read before it looked.)
		arrived := func() bool {
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			n, err := c.Read(make([]byte, 8))
			var ne net.Error
			return n > 0 || !errors.As(err, &ne) || !ne.Timeout()
		}
		before, _ := holders()
		if _, err := up.Write([]byte("A")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the first toxic to hold A", func() bool {
			h, _ := holders()
			for id := range h {
				if !before[id] {
					first = id
					return true
				}
			}
			return arrived()
		})
		waitFor(t, "the second toxic to hold A", func() bool {
			h, _ := holders()
			for id := range h {
				if !before[id] && id != first {
					second = id
					return true
				}
			}
			return arrived()
		})
		if _, err := up.Write([]byte("B")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the first toxic to hold B", func() bool {
			h, _ := holders()
			return h[first] || arrived()
		})
		void = arrived()
		_ = c.(*net.TCPConn).SetLinger(0) // close with a reset
		_ = c.Close()
		return void
	}
	for i := 1; try(); i++ {
		if i == 5 {
			t.Fatal("five tries, and each time A reached the client before its reset")
		}
	}

	// The outcome. A's delivery fails and the link's writer, the only
	// reader of the second toxic's output, exits; the second toxic takes
	// B, sleeps out its latency and settles. Stranded means it settled in
	// a plain channel send, which nothing can complete any more. Settled
	// anywhere else (gone, or a send it can give up) means toxiproxy fixed
	// the defect: drop the goleak exception in main_test.go and this test.
	p.Stop()
	var g string
	waitFor(t, "the second toxic to settle", func() bool {
		h, writers := holders()
		g = goroutines()[second]
		return !writers && !h[first] && !h[second] && !strings.Contains(g, " [running]") && !strings.Contains(g, " [runnable]")
	})
	if !strings.Contains(g, " [chan send") || !atFrame(g, latencySending) {
		t.Fatalf("the second latency toxic did not strand; its goroutine now:\n%s", g)
	}
}

// Frames of toxiproxy v2.5.0: the noop toxic (toxics/noop.go), the first
// stage of every link, handing a chunk on, and a link's reader handing what
// it read to the first stage (stream/io_chan.go).
const (
	noopSending   = "/toxics/noop.go:16"
	readerSending = "/stream/io_chan.go:29"
)

// TestToxiproxyNoopStrandsAGoroutine pins the same upstream defect in the
// noop toxic, the first stage of every link, so it needs no toxic at all:
// a link's writer that fails (its client went away) exits, and the noop
// toxic, already handing it the next chunk, blocks for ever; so does the
// link's reader if it holds one more chunk for the noop toxic. The chaos
// tests meet it when an instance closes a Redis or MySQL connection while
// answers are still streaming to it (the last CI run beside CPU hogs
// failed goleak on a stranded noop toxic). The test stops the client
// reading and lets the upstream write until the writer is blocked on the
// client's full socket and the noop toxic on the writer; only then does
// the client reset its connection. If the noop toxic does not end
// stranded, or a reader ends stranded anywhere but in that hand-over, the
// defect has changed: revisit the exceptions in main_test.go with this
// test.
func TestToxiproxyNoopStrandsAGoroutine(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite; skipped with -short")
	}
	p, ln := strandProxy(t, "strand-noop")
	c, up := connect(t, p, ln)
	defer up.Close()
	// The upstream streams until its connection fails; the client never
	// reads.
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		chunk := make([]byte, 32<<10)
		for {
			if _, err := up.Write(chunk); err != nil {
				return
			}
		}
	}()
	// blocked: the id of a noop toxic handing a chunk on while a link's
	// writer waits on its socket.
	blocked := func() (noop string) {
		writing := false
		for id, g := range goroutines() {
			if strings.Contains(g, " [chan send") && atFrame(g, noopSending) {
				noop = id
			}
			writing = writing || (strings.Contains(g, "(*ToxicLink).write(") && strings.Contains(g, " [IO wait"))
		}
		if !writing {
			return ""
		}
		return noop
	}
	var noop string
	waitFor(t, "the link's writer to block on the client and the noop toxic on the writer", func() bool {
		noop = blocked()
		return noop != ""
	})
	_ = c.(*net.TCPConn).SetLinger(0) // close with a reset
	_ = c.Close()

	// The writer fails and exits, the other link closes the upstream, the
	// upstream's writes fail. The noop toxic's send is then one nothing can
	// complete: stranded.
	<-streamed
	p.Stop()
	var g string
	var readers []string
	waitFor(t, "the links to settle", func() bool {
		all := goroutines()
		readers = nil
		for _, g := range all {
			if strings.Contains(g, "chaos.goroutines(") {
				continue // this one, dumping
			}
			if strings.Contains(g, " [running]") || strings.Contains(g, " [runnable]") || strings.Contains(g, "(*ToxicLink).write(") {
				return false
			}
			if strings.Contains(g, "(*ToxicLink).read(") {
				readers = append(readers, g)
			}
		}
		g = all[noop]
		return true
	})
	if !strings.Contains(g, " [chan send") || !atFrame(g, noopSending) {
		t.Fatalf("the noop toxic did not strand; its goroutine now:\n%s", g)
	}
	for _, r := range readers {
		if !strings.Contains(r, " [chan send") || !atFrame(r, readerSending) {
			t.Fatalf("a link's reader is left, not in its hand-over to the noop toxic:\n%s", r)
		}
	}
}
