// Package store keeps products, coupon batches and their orders in SQL, the
// source of truth. It speaks to MySQL 8 / MariaDB, and to an embedded SQLite
// file for the zero-set-up demo, through gorm with the same code: the models
// are in models.go, every statement in statements.go, and the Ledger
// (ledger.go) decides which run in one transaction. It turns driver errors
// into the inventory package's sentinels, so no other package needs to know
// a MySQL error number.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	mysqldriver "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/logger"
)

// Dialect names the SQL engine behind a DB.
type Dialect string

// The supported engines.
const (
	MySQL  Dialect = "mysql" // MySQL 8.0.16+ and MariaDB 10.11
	SQLite Dialect = "sqlite"
)

// DB is a connection pool to one database.
type DB struct {
	gdb     *gorm.DB
	dialect Dialect
	// wire, when set (by the tests' RecordWire), hears each statement
	// batch sent without gorm (sale.go).
	wire func(query string)
	// life ends when Close is called: background work that waits for
	// MySQL (Ledger.awaitRowFree) runs under it, and stops then.
	life context.Context
	end  context.CancelFunc
	// freeze, when set (Pool.FreezeFencedWrite), stops the process in the
	// first fenced stock write (freeze.go).
	freeze *freezer
}

// newDB returns a DB on gdb, alive until Close.
func newDB(gdb *gorm.DB, dialect Dialect) *DB {
	life, end := context.WithCancel(context.Background())
	return &DB{gdb: gdb, dialect: dialect, life: life, end: end}
}

// record passes a statement batch to the tests' recorder.
func (d *DB) record(query string) {
	if d.wire != nil {
		d.wire(query)
	}
}

// Pool bounds the connections one process opens to MySQL.
type Pool struct {
	// MaxConns caps open connections; a request that finds none free waits
	// for one, for as long as its context allows. Default DefaultMaxConns.
	MaxConns int
	// MaxLifetime closes connections older than this, so a server
	// restart or failover is picked up. Default 5 minutes.
	MaxLifetime time.Duration
	// FreezeFencedWrite is fault injection for the chaos suite
	// (SECKILL_FREEZE_BEFORE_FENCED_WRITE); leave it nil. When set, the
	// first fenced stock write of a lock stage (Ledger.WriteComputed with
	// a token) hands it the write of its batch to the socket, after the
	// driver's last look at the write's context (and so at the lease):
	// it must call send, once, and return what send returned. The serve
	// command's hook stops the whole process there (freeze.go).
	FreezeFencedWrite func(send func() (int, error)) (int, error)
}

// DefaultMaxConns keeps three replicas (96 connections) well inside MySQL's
// default max_connections of 151, with room for admin and migration
// sessions. A hot item's buyers queue on one row lock anyway, so more
// connections would add waiting inside MySQL, not throughput.
const DefaultMaxConns = 32

// OpenMySQL connects to MySQL or MariaDB. The DSN is the go-sql-driver form
// (user:pass@tcp(host:3306)/db); found-rows reporting is switched on because
// the stages read "rows matched" from UPDATE statements, and so are
// interpolateParams and multiStatements, for the one-batch sale. The pool is
// bounded by pool (zero fields take their defaults).
func OpenMySQL(ctx context.Context, dsn string, pool Pool) (*DB, error) {
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse MySQL DSN: %w", err)
	}
	cfg.ClientFoundRows = true
	cfg.ParseTime = true
	// A sale is one multi-statement (sale.go), which MySQL cannot prepare:
	// the driver fills in its arguments. Every other statement then also
	// goes in one round trip instead of a prepare and an execute.
	cfg.InterpolateParams = true
	cfg.MultiStatements = true
	// The driver's liveness check reads the socket of every pooled
	// connection before its first statement (a non-blocking read), to drop
	// one the server closed while it was idle. That is a system call on
	// every sale, paid for the day MySQL restarts, a failover moves it or a
	// DBA kills the pool's connections: BenchmarkMySQLLivenessCheck put it
	// at 1.075x the client CPU per statement (median of five; 0.99-1.35x on
	// a busy machine). Off, each killed connection fails the next sale that
	// takes it, once, with inventory.ErrUnavailable or ErrOutcomeUnknown
	// (TestKilledConnectionCostsOneSale), and is dropped; a group commit's
	// batch, which carries several buyers, reads its connection's socket
	// first, once a group (liveConn, sale.go), and a connection that sat
	// idle in the pool for a second is read as it is handed out again
	// (idleCheckAfter, bounded.go). Pool.MaxLifetime,
	// kept below the server's wait_timeout, still retires connections
	// before the server's own idle timeout closes them.
	cfg.CheckConnLiveness = false
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	var frozen *freezer
	if pool.FreezeFencedWrite != nil {
		frozen = &freezer{freeze: pool.FreezeFencedWrite}
		cfg.DialFunc = frozen.dial // a DSN cannot carry it
	}
	if cfg.DialFunc == nil && (cfg.Net == "tcp" || cfg.Net == "unix") {
		// What the driver dials these networks with (the store
		// registers no dial of its own for them).
		var d net.Dialer
		cfg.DialFunc = d.DialContext
	}
	if cfg.DialFunc != nil {
		// Each connection knows its socket, which a group's batch reads
		// before it goes out on it (liveConn, sale.go). The driver tries
		// DialFunc before its registry of dials, so a dial registered
		// (mysql.RegisterDialContext) under "tcp" or "unix" is not used:
		// register a proxy's or a tunnel's dial under a name of its own
		// and put that name in the DSN. Such a network keeps its own
		// dial, and its connections go unchecked.
		cfg.DialFunc = recordDial(cfg.DialFunc)
	}
	connector, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	// Every exchange of a connection ends with its caller's context
	// (bounded.go), not only the ones the driver watches.
	sqlDB := sql.OpenDB(boundedConnector{connector})
	gdb, err := openGorm(mysql.New(mysql.Config{DSNConfig: cfg, Conn: sqlDB}), gormConfig())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open mysql: %w", err), sqlDB.Close())
	}
	if pool.MaxConns <= 0 {
		pool.MaxConns = DefaultMaxConns
	}
	if pool.MaxLifetime <= 0 {
		pool.MaxLifetime = 5 * time.Minute
	}
	// Idle connections equal to the cap: a flash crowd arrives in waves,
	// and closing connections between them would make each wave dial again.
	sqlDB.SetMaxOpenConns(pool.MaxConns)
	sqlDB.SetMaxIdleConns(pool.MaxConns)
	sqlDB.SetConnMaxLifetime(pool.MaxLifetime)
	db := newDB(gdb, MySQL)
	db.freeze = frozen
	if err := db.Ping(ctx); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return db, nil
}

// OpenSQLite opens (creating if needed) the SQLite file at path. All access
// goes through one connection: SQLite has one writer at a time anyway, and
// one connection avoids busy errors between our own goroutines.
func OpenSQLite(ctx context.Context, file string) (*DB, error) {
	dsn := file + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	gdb, err := openGorm(sqlite.Open(dsn), gormConfig())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", file, err)
	}
	sqlDB, err := gdb.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(1)
	db := newDB(gdb, SQLite)
	if err := db.Ping(ctx); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return db, nil
}

// gormConfig is the one configuration of both engines. SkipDefaultTransaction
// keeps gorm from wrapping each write in a transaction of its own (the
// Ledger opens the ones it needs); TranslateError turns duplicate keys into
// gorm.ErrDuplicatedKey; QueryFields makes a model's SELECT name its fields
// instead of *, so the timestamps the models leave out are not read.
func gormConfig() *gorm.Config {
	return &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		TranslateError:         true,
		QueryFields:            true,
	}
}

// openGorm opens d with cfg and plain INSERTs. On SQLite 3.35+ and MariaDB
// 10.5+ gorm would insert with INSERT ... RETURNING id, to read back an id
// the store never uses; that makes each order's insert a query, and on the
// demo's SQLite driver its result set cost about as much CPU as the rest of
// the purchase (BenchmarkPurchase). Only the returning is left out: gorm's
// own create callback runs, configured without it.
func openGorm(d gorm.Dialector, cfg *gorm.Config) (*gorm.DB, error) {
	gdb, err := gorm.Open(d, cfg)
	if err != nil {
		return nil, err
	}
	if err := gdb.Callback().Create().Replace("gorm:create", callbacks.Create(&callbacks.Config{})); err != nil {
		return nil, err
	}
	return gdb, nil
}

// Dialect reports the engine.
func (d *DB) Dialect() Dialect { return d.dialect }

// Ping checks that the database answers.
func (d *DB) Ping(ctx context.Context) error {
	sqlDB, err := d.gdb.DB()
	if err != nil {
		return err
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return translate(fmt.Errorf("ping %s: %w", d.dialect, err))
	}
	return nil
}

// Close closes the pool.
func (d *DB) Close() error {
	d.end()
	sqlDB, err := d.gdb.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// splitStatements splits a schema file on semicolons that end a line, after
// dropping "--" comment lines. Our files keep to that shape.
func splitStatements(body string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(body, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// ErrUnsafeServer means the MySQL server would not enforce the constraints
// the design relies on.
var ErrUnsafeServer = errors.New("database server settings are unsafe")

// CheckSafety refuses a MySQL or MariaDB server that would let a CHECK
// violation or an out-of-range value pass silently: sql_mode must contain
// STRICT_TRANS_TABLES (or STRICT_ALL_TABLES), and MariaDB's
// check_constraint_checks must be on. SQLite always enforces CHECK.
func (d *DB) CheckSafety(ctx context.Context) error {
	if d.dialect != MySQL {
		return nil
	}
	var row struct {
		Mode    string
		Version string
	}
	if err := d.gdb.WithContext(ctx).Raw("SELECT @@SESSION.sql_mode AS mode, VERSION() AS version").Scan(&row).Error; err != nil {
		return translate(fmt.Errorf("read sql_mode: %w", err))
	}
	var problems []string
	if !strings.Contains(row.Mode, "STRICT_TRANS_TABLES") && !strings.Contains(row.Mode, "STRICT_ALL_TABLES") {
		problems = append(problems, fmt.Sprintf("sql_mode %q lacks STRICT_TRANS_TABLES: set it in the server config (sql_mode=STRICT_TRANS_TABLES,...) or add sql_mode='STRICT_TRANS_TABLES' to SECKILL_MYSQL_DSN", row.Mode))
	}
	if strings.Contains(strings.ToLower(row.Version), "mariadb") {
		var on int
		if err := d.gdb.WithContext(ctx).Raw("SELECT @@SESSION.check_constraint_checks").Scan(&on).Error; err != nil {
			return translate(fmt.Errorf("read check_constraint_checks: %w", err))
		}
		if on != 1 {
			problems = append(problems, "MariaDB check_constraint_checks is OFF: set check_constraint_checks=ON in the server config, or remove it from SECKILL_MYSQL_DSN")
		}
	} else {
		var major, minor, patch int
		if _, err := fmt.Sscanf(row.Version, "%d.%d.%d", &major, &minor, &patch); err == nil &&
			(major < 8 || major == 8 && minor == 0 && patch < 16) {
			problems = append(problems, fmt.Sprintf("MySQL %s does not enforce CHECK constraints: use 8.0.16 or newer", row.Version))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrUnsafeServer, strings.Join(problems, "; "))
	}
	return nil
}

// Exec runs one statement; the tests and the migrate command use it.
func (d *DB) Exec(ctx context.Context, stmt string, args ...any) error {
	return translate(d.gdb.WithContext(ctx).Exec(stmt, args...).Error)
}

// Raw runs a query for the tests and the lab's cross-checks.
func (d *DB) Raw(ctx context.Context, query string, args ...any) interface{ Scan(dest ...any) error } {
	return d.gdb.WithContext(ctx).Raw(query, args...).Row()
}
