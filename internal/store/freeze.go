package store

import (
	"bytes"
	"context"
	"net"
	"sync"
)

// freezer is fault injection for the chaos suite (Pool.FreezeFencedWrite):
// it runs the first fenced stock write's bytes through a hook that stops
// the process, after every check of the lease that guards the write.
//
// The section checks its lease (Held.Err), and its context looks at the
// lease's clock again wherever database/sql and the driver check it; the
// driver's last look is just before it writes the batch to the socket. A
// pause there is the one no check can see: when the process resumes, the
// bytes go out. Only the fencing token at the stock write stops them.
type freezer struct {
	freeze func(send func() (int, error)) (int, error)

	mu   sync.Mutex
	mark string // the batch to freeze in; "" when none is armed
	done bool   // the freeze has happened: it happens once
}

// arm names the batch to freeze in by the mark it carries (saleMark),
// until the freeze has happened; a later arm replaces an earlier one,
// whose write may have failed before it was sent. A nil freezer does
// nothing.
func (f *freezer) arm(mark string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.done {
		f.mark = mark
	}
}

// take reports whether p is the armed batch, and disarms the freezer if so.
func (f *freezer) take(p []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done || f.mark == "" || !bytes.Contains(p, []byte(f.mark)) {
		return false
	}
	f.done = true
	return true
}

// dial is the driver's dial function under a freezer: a plain TCP dial
// whose connection passes its writes by the freezer.
func (f *freezer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &freezingConn{Conn: c, f: f}, nil
}

// Unwrap is the socket under the hook, for socketOpen.
func (c *freezingConn) Unwrap() net.Conn { return c.Conn }

// freezingConn is a MySQL connection whose write of the armed batch goes
// through the freezer's hook.
type freezingConn struct {
	net.Conn
	f *freezer
	// writing is held across the frozen write, so that a Close (the
	// driver's, when the lease's context ends on resuming) comes after
	// it, as a close comes after a write system call already under way.
	writing sync.Mutex
}

func (c *freezingConn) Write(p []byte) (int, error) {
	if !c.f.take(p) {
		return c.Conn.Write(p)
	}
	c.writing.Lock()
	defer c.writing.Unlock()
	return c.f.freeze(func() (int, error) { return c.Conn.Write(p) })
}

func (c *freezingConn) Close() error {
	c.writing.Lock()
	defer c.writing.Unlock()
	return c.Conn.Close()
}
