package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sync"
	"time"

	"gorm.io/gorm"

	schema "github.com/seckill-lab/seckill/sql"
)

// Wire records what a DB sends to its database: every statement gorm
// runs, and every BEGIN, COMMIT and ROLLBACK. The store tests count the
// statements one purchase costs with it.
type Wire struct {
	mu    sync.Mutex
	lines []string
}

// Take returns what was recorded since the last Take.
func (w *Wire) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.lines
	w.lines = nil
	return lines
}

// Seen reports whether line was recorded since the last Take.
func (w *Wire) Seen(line string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.lines, line)
}

func (w *Wire) add(line string) {
	w.mu.Lock()
	w.lines = append(w.lines, line)
	w.mu.Unlock()
}

// RecordWire makes db record its statements from now on.
func RecordWire(db *DB) *Wire {
	w := &Wire{}
	sqlDB, err := db.gdb.DB()
	if err != nil {
		panic(err)
	}
	p := &wirePool{wireConn: wireConn{ConnPool: sqlDB, wire: w}, sqlDB: sqlDB}
	db.gdb.ConnPool = p
	db.gdb.Statement.ConnPool = p
	db.wire = w.add
	return w
}

// wireConn passes every statement on after recording it.
type wireConn struct {
	gorm.ConnPool // the *sql.DB or *sql.Tx
	wire          *Wire
}

func (p *wireConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	p.wire.add(query)
	return p.ConnPool.ExecContext(ctx, query, args...)
}

func (p *wireConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	p.wire.add(query)
	return p.ConnPool.QueryContext(ctx, query, args...)
}

func (p *wireConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	p.wire.add(query)
	return p.ConnPool.QueryRowContext(ctx, query, args...)
}

func (p *wireConn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	p.wire.add("PREPARE " + query)
	return p.ConnPool.PrepareContext(ctx, query)
}

// wirePool is the recording pool; a transaction it begins records too.
type wirePool struct {
	wireConn
	sqlDB *sql.DB
}

// BeginTx makes gorm run the transaction's statements through a recording
// wrapper too (gorm.ConnPoolBeginner).
func (p *wirePool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	p.wire.add("BEGIN")
	tx, err := p.sqlDB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &wireTx{wireConn: wireConn{ConnPool: tx, wire: p.wire}, tx: tx}, nil
}

// GetDBConn lets gorm's DB() (Ping, Close) find the real pool.
func (p *wirePool) GetDBConn() (*sql.DB, error) { return p.sqlDB, nil }

// wireTx is a recording *sql.Tx. Like *sql.Tx, it cannot begin another
// transaction, so gorm treats it exactly as it would the real one.
type wireTx struct {
	wireConn
	tx *sql.Tx
}

func (t *wireTx) Commit() error {
	t.wire.add("COMMIT")
	return t.tx.Commit()
}

func (t *wireTx) Rollback() error {
	t.wire.add("ROLLBACK")
	return t.tx.Rollback()
}

// MigrateLock is the SQL naming Migrate's lock in the current database.
const MigrateLock = migrateLock

// Gorm hands a test the DB's gorm handle, for gorm's migrator to read the
// live schema with.
func Gorm(db *DB) *gorm.DB { return db.gdb }

// ApplyFiles runs the named schema files of db's dialect as they are,
// statement by statement, without Migrate's catalog checks: a test builds
// a database of an older schema with it.
func ApplyFiles(ctx context.Context, db *DB, names ...string) error {
	for _, name := range names {
		body, err := fs.ReadFile(schema.Files, path.Join(string(db.dialect), name))
		if err != nil {
			return err
		}
		for _, stmt := range splitStatements(string(body)) {
			if err := db.gdb.WithContext(ctx).Exec(stmt).Error; err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// RunTx runs fn in one transaction of l and commits it, as every computed
// write of l does (Ledger.runTx).
func RunTx(ctx context.Context, l *Ledger, fn func(tx *gorm.DB) error) error {
	return l.runTx(ctx, fn)
}

// SetIdleCheckAfter sets how long a pooled connection sits idle before its
// socket is read as it is handed out again, until the test ends.
func SetIdleCheckAfter(t interface{ Cleanup(func()) }, d time.Duration) {
	old := idleCheckAfter
	idleCheckAfter = d
	t.Cleanup(func() { idleCheckAfter = old })
}

// SetIdleClock sets the clock of the idle window (Unix ns), until the test
// ends, and returns how many sockets the window has had read so far.
func SetIdleClock(t interface{ Cleanup(func()) }, now func() int64) (checks func() int64) {
	old := idleClock
	idleClock = now
	t.Cleanup(func() { idleClock = old })
	return idleChecks.Load
}
