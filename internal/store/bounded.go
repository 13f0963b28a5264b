package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// MySQL exchanges that end with the call's context.
//
// go-sql-driver watches a call's context only while that call waits: a
// deadline closes the connection under a query, a statement or a BEGIN
// still waiting for its answer. Two exchanges of every pool are not
// watched, and the DSN sets no read timeout, so a MySQL gone silent in
// them (a blackhole, a paused server) held the caller until the
// connection died, long past its deadline:
//
//   - the rest of a result. A query returns once its first packets came;
//     Rows.Close then reads what is left (the rows not read, the end of
//     the result) after the driver stopped watching. gorm's Take and a
//     Row's Scan close after the first row, so every stock, window and
//     clock read of a buy ended in such a read
//     (TestReadWhoseRestNeverComesEndsAtTheDeadline);
//   - a transaction's ROLLBACK, which database/sql sends with no context
//     after a statement was refused (a repeat buyer, an unknown item)
//     (TestRollbackWhoseAnswerNeverComesEndsAtTheDeadline).
//
// boundedConnector wraps the driver's connections so that both end with
// the context of the call they belong to: closing rows first reads the
// rest of the result through the driver's Next, which the query's watch
// still covers, and a ROLLBACK runs as a statement under the context the
// transaction began with. A ROLLBACK cut off, or due after that context
// ended, closes the connection instead, and MySQL rolls back a
// transaction whose connection closed.
//
// The COMMIT is not wrapped: runTx bounds the wait for it and keeps its
// outcome unknown until it ends (ledger.go). DB.batch rolls a refused sale
// batch back itself, within rollbackWait (sale.go). A read timeout in the DSN
// would bound all of these, but by one figure for every caller, not by
// each caller's deadline.
type boundedConnector struct {
	driver.Connector
}

// mysqlConn is what the driver's connections implement, and what
// database/sql, gorm and DB.batch use of them.
type mysqlConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// mysqlRows is what the driver's rows implement.
type mysqlRows interface {
	driver.Rows
	driver.RowsNextResultSet
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeNullable
	driver.RowsColumnTypePrecisionScale
	driver.RowsColumnTypeScanType
}

func (c boundedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	s := &dialedSocket{}
	conn, err := c.Connector.Connect(context.WithValue(ctx, dialedKey{}, s))
	if err != nil {
		return nil, err
	}
	mc, ok := conn.(mysqlConn)
	if !ok {
		return conn, nil // not go-sql-driver's: nothing known to wrap
	}
	bc := boundedConn{mysqlConn: mc, sock: s.conn, returned: new(atomic.Int64)}
	bc.returned.Store(idleClock())
	return bc, nil
}

// boundedConn is a connection whose rows and transactions end with their
// call's context.
type boundedConn struct {
	mysqlConn
	// sock is its socket, as dialled (recordDial), for the check of
	// liveConn; nil when the dial was not seen.
	sock net.Conn
	// returned is when it last went back to the pool (Unix ns; IsValid,
	// which database/sql calls on every return), or was dialled.
	returned *atomic.Int64
}

// idleCheckAfter is how long a connection must have sat in the pool for
// its socket to be read before it is handed out again (ResetSession). The
// driver's own check, on every use, is off (store.go): a sale's
// connection comes back within milliseconds and goes unchecked, as
// before, while one that sat idle, the connections of admin statements,
// audits and the first sales after a quiet spell, is checked first. A
// connection the server closed while it sat idle (a KILL, a restart, a
// proxy's idle timeout) is then dropped and another taken, instead of
// failing the statement sent on it: an operator resetting items by hand
// after a KILL of the pool's connections got up to 28 503s in a row, one
// per stale connection. A variable for the tests.
var idleCheckAfter = time.Second

// Tests: the clock of the idle window, and how many sockets it had read.
var (
	idleClock  = func() int64 { return time.Now().UnixNano() }
	idleChecks atomic.Int64
)

// IsValid is asked by the pool as the connection comes back: the driver's
// answer, and the instant, from which ResetSession counts its idle time.
func (c boundedConn) IsValid() bool {
	if c.returned != nil {
		c.returned.Store(idleClock())
	}
	return c.mysqlConn.IsValid()
}

// ResetSession runs as the pool hands out the connection again: one that
// sat idle longer than idleCheckAfter and whose socket the server closed
// is refused (driver.ErrBadConn: database/sql drops it and takes or dials
// another), before the driver's own reset.
func (c boundedConn) ResetSession(ctx context.Context) error {
	if c.returned != nil && idleClock()-c.returned.Load() > int64(idleCheckAfter) {
		idleChecks.Add(1)
		if !c.alive() {
			return driver.ErrBadConn
		}
	}
	return c.mysqlConn.ResetSession(ctx)
}

// alive reads the connection's socket without waiting: false when the
// server closed it, or sent what nobody asked for.
func (c boundedConn) alive() bool {
	if c.sock == nil {
		return true
	}
	return socketOpen(c.sock)
}

// dialedKey is the context key under which Connect asks the dial for the
// socket it opens.
type dialedKey struct{}

type dialedSocket struct{ conn net.Conn }

// recordDial wraps a MySQL dial so that the socket it opens is known to
// the connection Connect returns.
func recordDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if s, ok := ctx.Value(dialedKey{}).(*dialedSocket); ok && err == nil {
			s.conn = c
		}
		return c, err
	}
}

func (c boundedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.mysqlConn.QueryContext(ctx, query, args)
	if err != nil {
		return nil, err
	}
	if r, ok := rows.(mysqlRows); ok {
		return drainedRows{r}, nil
	}
	return rows, nil
}

func (c boundedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.mysqlConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return boundedTx{Tx: tx, ctx: ctx, conn: c.mysqlConn}, nil
}

// drainedRows reads the rest of its result before it closes, while the
// query's context is still watched.
type drainedRows struct {
	mysqlRows
}

func (r drainedRows) Close() error {
	err := r.drain()
	if cerr := r.mysqlRows.Close(); cerr != nil || err == nil {
		return cerr
	}
	return err
}

// drain reads the rows left, of this result and of any after it.
func (r drainedRows) drain() error {
	for {
		dest := make([]driver.Value, len(r.Columns()))
		for {
			err := r.Next(dest)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
		}
		if !r.HasNextResultSet() {
			return nil
		}
		if err := r.NextResultSet(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// boundedTx rolls back under the context its transaction began with.
type boundedTx struct {
	driver.Tx
	ctx  context.Context
	conn driver.ExecerContext
}

// Rollback sends ROLLBACK as a statement, which the driver watches. The
// driver's own Tx is not used again: database/sql ends a transaction once.
func (t boundedTx) Rollback() error {
	if t.ctx.Err() != nil {
		// The caller is gone: close the connection rather than wait for an
		// answer nobody bounds. MySQL rolls the transaction back.
		return driver.ErrBadConn
	}
	if _, err := t.conn.ExecContext(t.ctx, "ROLLBACK", nil); err != nil {
		return errors.Join(driver.ErrBadConn, err)
	}
	return nil
}
