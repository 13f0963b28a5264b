package store_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// replyHolder relays MySQL connections packet by packet and, once armed
// for a query, holds back MySQL's reply to that query from a chosen
// packet on: a MySQL gone silent at that point of the exchange (a
// blackhole, a paused server). The order is forced: the hold is handed to
// the connection's server side before the query is passed on, so no part
// of the reply can slip through first.
type replyHolder struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	armed  *hold // for the next query it matches
}

// hold is one held reply.
type hold struct {
	match func(query string) bool
	// afterFirstRow passes the head of a result set (its column count, its
	// columns) and its first row, and holds the rest: the end of the
	// result. Otherwise the whole reply is held.
	afterFirstRow bool
	held          chan struct{} // closed once the reply is held
	release       chan struct{} // closed by free: the held reply goes on
	once          sync.Once
}

// free lets the held reply go on (once).
func (h *hold) free() { h.once.Do(func() { close(h.release) }) }

func newReplyHolder(t *testing.T, target string) *replyHolder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &replyHolder{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go r.serve()
	return r
}

// arm holds the reply to the next query that match accepts. The hold is
// let go when the test ends, if not before.
func (r *replyHolder) arm(t *testing.T, match func(query string) bool, afterFirstRow bool) *hold {
	h := &hold{match: match, afterFirstRow: afterFirstRow, held: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.free) // before the database's Close: registered after it
	r.mu.Lock()
	r.armed = h
	r.mu.Unlock()
	return h
}

// take returns the armed hold if it matches query, disarming it.
func (r *replyHolder) take(query string) *hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.armed; h != nil && h.match(query) {
		r.armed = nil
		return h
	}
	return nil
}

func (r *replyHolder) serve() {
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		next := make(chan *hold, 1)
		go r.toServer(client, server, next)
		go toClient(client, server, next)
	}
}

// readPacket reads one MySQL packet: its four-byte header and payload.
func readPacket(c net.Conn) (header [4]byte, payload []byte, err error) {
	if _, err = io.ReadFull(c, header[:]); err != nil {
		return header, nil, err
	}
	payload = make([]byte, int(header[0])|int(header[1])<<8|int(header[2])<<16)
	_, err = io.ReadFull(c, payload)
	return header, payload, err
}

func writePacket(c net.Conn, header [4]byte, payload []byte) error {
	_, err := c.Write(append(header[:], payload...))
	return err
}

// toServer passes the client's packets on; a query (COM_QUERY) that the
// armed hold matches hands it to the server side first.
func (r *replyHolder) toServer(client, server net.Conn, next chan<- *hold) {
	defer func() { _ = client.Close(); _ = server.Close() }()
	for {
		header, payload, err := readPacket(client)
		if err != nil {
			return
		}
		if len(payload) > 0 && payload[0] == 0x03 { // COM_QUERY
			if h := r.take(string(payload[1:])); h != nil {
				next <- h
			}
		}
		if err := writePacket(server, header, payload); err != nil {
			return
		}
	}
}

// toClient passes the server's packets on, and holds the reply to a query
// handed over on next as its hold says. The client sends its next command
// only once it has read the whole reply to the last one, so a hold
// handed over applies to the next packet the server sends.
func toClient(client, server net.Conn, next <-chan *hold) {
	defer func() { _ = client.Close(); _ = server.Close() }()
	var h *hold
	var at replyPlace
	for {
		header, payload, err := readPacket(server)
		if err != nil {
			return
		}
		if h == nil {
			select {
			case h = <-next:
				at = replyPlace{}
			default:
			}
		}
		if h != nil && at.holds(h, payload) {
			close(h.held)
			<-h.release
			h = nil
		}
		if err := writePacket(client, header, payload); err != nil {
			return
		}
	}
}

// replyPlace is where a held reply's relay stands: the packets passed on.
type replyPlace struct {
	passed  int
	columns int  // of the result set, read from its first packet
	rowSeen bool // its first row was passed on
}

// holds says whether payload, the reply's next packet, is where h holds
// it, and counts it passed otherwise: the first packet, or (afterFirstRow)
// the one after the first row of a result set. A result set is its
// column count, its columns, an EOF after them unless the client asked
// for none (CLIENT_DEPRECATE_EOF), its rows and its end.
func (p *replyPlace) holds(h *hold, payload []byte) bool {
	if !h.afterFirstRow {
		return true
	}
	switch {
	case p.passed == 0:
		n, ok := lenencInt(payload)
		if !ok {
			return true // an OK or an error, not a result set: hold it all
		}
		p.columns = n
	case p.passed <= p.columns:
		// a column
	case p.rowSeen:
		return true
	case len(payload) > 0 && payload[0] == 0xfe && len(payload) < 9:
		// the EOF after the columns
	default:
		p.rowSeen = true
	}
	p.passed++
	return false
}

// lenencInt reads the length-encoded integer that opens a result set's
// first packet (its column count); ok is false for an OK (0x00), an error
// (0xff) or a local-infile request (0xfb).
func lenencInt(p []byte) (int, bool) {
	if len(p) == 0 {
		return 0, false
	}
	switch b := p[0]; {
	case b == 0x00 || b == 0xff || b == 0xfb:
		return 0, false
	case b < 0xfb:
		return int(b), true
	case b == 0xfc && len(p) >= 3:
		return int(p[1]) | int(p[2])<<8, true
	case b == 0xfd && len(p) >= 4:
		return int(p[1]) | int(p[2])<<8 | int(p[3])<<16, true
	}
	return 0, false
}

// throughHolder opens the test MySQL through a reply-holding relay,
// migrated, with product 1 reset to 10 units.
func throughHolder(t *testing.T) (*replyHolder, *store.Ledger) {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	r := newReplyHolder(t, cfg.Addr)
	cfg.Addr = r.ln.Addr().String()
	l := openMySQL(t, cfg.FormatDSN(), store.Pool{}).Products()
	if err := l.Reset(context.Background(), 1, 10); err != nil {
		t.Fatal(err)
	}
	return r, l
}

// endsWhileHeld runs call under a deadline that passes once h holds its
// reply and then, with waiting, once waiting says call waits for it, and
// returns call's error. It fails the test if the reply was never held, or
// if call still waits for it a minute after its deadline (then the reply
// is let go, so that call ends and so does the test).
func endsWhileHeld(t *testing.T, h *hold, waiting func() bool, what string, call func(ctx context.Context) error) error {
	t.Helper()
	ctx := testkit.NewCueDeadline()
	go func() {
		select {
		case <-h.held:
			if waiting != nil {
				testkit.Poll(time.Minute, waiting)
			}
		case <-time.After(time.Minute): // nothing was held: said below
		}
		ctx.Fall()
	}()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		h.free()
		t.Fatalf("%s still waited for MySQL's held reply a minute after its deadline (returned once let go: %v)", what, <-done)
	}
	select {
	case <-h.held:
	default:
		t.Fatalf("%s returned %v, and the relay held no reply: the test did not force the step", what, err)
	}
	return err
}

// readingTheRest reports whether a goroutine waits for MySQL inside the
// Close of a database/sql Rows: it reads the rest of a result whose first
// row was read. The deadline must pass then, not before: a deadline that
// passes while the driver still watches it (the row's own read, or before
// Close stops the watch) cut the read before, too.
func readingTheRest() bool {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "database/sql.(*Rows).close") && strings.Contains(g, "(*mysqlConn).readPacket") {
			return true
		}
	}
	return false
}

// TestReadWhoseRestNeverComesEndsAtTheDeadline: a read whose first row
// came and whose end never does (MySQL went silent mid-reply) must end at
// its deadline. The driver watches a query's context only until the query
// call returns; the rest of the result is read when the rows are closed,
// after it stopped watching, and gorm's Take and a Row's Scan close after
// the first row. The DSN sets no read timeout, so before, such a read
// waited until the connection died: a buy's stock or window read, held
// past its deadline, left the buyer unanswered. Every buy of a lock stage
// makes these reads.
func TestReadWhoseRestNeverComesEndsAtTheDeadline(t *testing.T) {
	r, l := throughHolder(t)
	reads := []struct {
		name  string
		match func(q string) bool
		read  func(ctx context.Context) error
	}{
		{"stock", func(q string) bool {
			return strings.HasPrefix(q, "SELECT") && strings.Contains(q, "stock") && !strings.Contains(q, "opens_at")
		},
			func(ctx context.Context) error { _, err := l.ReadStock(ctx, 1); return err }},
		{"sale window", func(q string) bool { return strings.HasPrefix(q, "SELECT") && strings.Contains(q, "opens_at") },
			func(ctx context.Context) error { _, err := l.WindowAt(ctx, 1); return err }},
		{"database clock", func(q string) bool { return strings.Contains(q, "UTC_TIMESTAMP") },
			func(ctx context.Context) error { _, err := l.Now(ctx); return err }},
	}
	for _, c := range reads {
		t.Run(c.name, func(t *testing.T) {
			h := r.arm(t, c.match, true)
			err := endsWhileHeld(t, h, readingTheRest, "a read of the "+c.name, c.read)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a read whose end never came: %v; want the deadline's error", err)
			}
		})
	}
}

// TestRollbackWhoseAnswerNeverComesEndsAtTheDeadline: a transaction that
// MySQL refused (a repeat buyer's order, an unknown item) is rolled back
// before its refusal is answered, and a MySQL gone silent after the
// refusal must not hold that answer past its deadline. database/sql sends
// the ROLLBACK with no context and the DSN sets no read timeout, so
// before, the refusal waited for the ROLLBACK's answer until the
// connection died. The refusal stays true: the connection is closed at
// the deadline, and MySQL rolls back a transaction whose connection
// closed.
func TestRollbackWhoseAnswerNeverComesEndsAtTheDeadline(t *testing.T) {
	r, l := throughHolder(t)
	ctx := context.Background()
	if err := l.WriteComputed(ctx, order("rb-first", "rb-buyer", 1), 9, 0); err != nil {
		t.Fatal(err)
	}
	rollback := func(q string) bool { return strings.TrimSpace(q) == "ROLLBACK" }
	for _, c := range []struct {
		name  string
		write func(ctx context.Context) error
		want  error
	}{
		// Unfenced: a transaction of separate statements (WriteComputed).
		{"repeat buyer's computed write", func(ctx context.Context) error {
			return l.WriteComputed(ctx, order("rb-again", "rb-buyer", 1), 8, 0)
		}, inventory.ErrAlreadyPurchased},
		{"reset of an unknown item", func(ctx context.Context) error { return l.Reset(ctx, 999, 1) }, inventory.ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := r.arm(t, rollback, false)
			err := endsWhileHeld(t, h, nil, "the "+c.name, c.write)
			if !errors.Is(err, c.want) {
				t.Fatalf("the %s: %v; want %v", c.name, err, c.want)
			}
		})
	}
	a, err := l.Audit(ctx, 1)
	if err != nil || a.Orders != 1 || a.Stock != 9 || !a.Conserved() {
		t.Fatalf("Audit = %+v, %v; want the first order alone", a, err)
	}
}
