package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// commitCutter relays MySQL connections and, once armed, breaks the
// connection that sends a COMMIT right after handing the COMMIT to the
// server: MySQL commits, and the client never hears it.
type commitCutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	armed  bool
}

func newCommitCutter(t *testing.T, target string) *commitCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &commitCutter{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go c.serve()
	return c
}

func (c *commitCutter) arm() { c.mu.Lock(); c.armed = true; c.mu.Unlock() }

func (c *commitCutter) take() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.armed
	c.armed = false
	return was
}

func (c *commitCutter) serve() {
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		go func() { _, _ = io.Copy(client, server); _ = client.Close() }()
		go func() {
			defer func() { _ = client.Close(); _ = server.Close() }()
			buf := make([]byte, 64<<10)
			var tail []byte // the end of the last read, in case a COMMIT straddles two
			for {
				n, err := client.Read(buf)
				if n > 0 {
					if _, werr := server.Write(buf[:n]); werr != nil {
						return
					}
					seen := append(tail, buf[:n]...)
					if bytes.Contains(seen, []byte("COMMIT")) && c.take() {
						return // the COMMIT is sent; its answer is not
					}
					tail = append([]byte(nil), seen[max(0, len(seen)-5):]...)
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// TestCommitWhoseAnswerIsLost: a connection that breaks after the COMMIT
// was sent leaves the sale's outcome unknown, for the lock stages' write
// (a transaction of separate statements) and for the sale batch alike. It
// must not be reported as "unavailable", which promises nothing was
// written: the order is there. Seen in the chaos suite beside CPU hogs,
// where healing a blackholed MySQL closed connections mid-commit and a
// buyer was told 503 unavailable about an order that existed.
func TestCommitWhoseAnswerIsLost(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cut := newCommitCutter(t, cfg.Addr)
	cfg.Addr = cut.ln.Addr().String()
	ctx := context.Background()
	db, err := store.OpenMySQL(ctx, cfg.FormatDSN(), store.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l := db.Products()
	if err := l.Reset(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		write func(o inventory.Order) error
	}{
		{"lock stage write", func(o inventory.Order) error { return l.WriteComputed(ctx, o, 9, 0) }},
		{"sale batch", func(o inventory.Order) error { return l.Deduct(ctx, o) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := order("lost-"+c.name[:4], "buyer-"+c.name[:4], 1)
			cut.arm()
			err := c.write(o)
			if !errors.Is(err, inventory.ErrOutcomeUnknown) || errors.Is(err, inventory.ErrUnavailable) {
				t.Fatalf("a commit whose answer was lost: %v; want ErrOutcomeUnknown, not ErrUnavailable", err)
			}
			if !testkit.Poll(10*time.Second, func() bool {
				ok, err := l.OrderExists(ctx, o.No)
				return err == nil && ok
			}) {
				t.Fatalf("order %s is not in the database: the test did not cut a commit", o.No)
			}
		})
	}
}
