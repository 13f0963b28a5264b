// Package store keeps products, coupon batches and their orders in SQL, the
// source of truth. It speaks to MySQL 8 / MariaDB through gorm, and to an
// embedded SQLite file for the zero-set-up demo, with the same queries, and
// it turns driver errors into the inventory package's sentinels so no other
// package needs to know a MySQL error number.
package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	mysqldriver "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	schema "github.com/seckill-lab/seckill/sql"
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
}

// OpenMySQL connects to MySQL or MariaDB. The DSN is the go-sql-driver form
// (user:pass@tcp(host:3306)/db); found-rows reporting is switched on because
// the stages read "rows matched" from UPDATE statements.
func OpenMySQL(ctx context.Context, dsn string) (*DB, error) {
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("SECKILL_MYSQL_DSN: %w", err)
	}
	cfg.ClientFoundRows = true
	cfg.ParseTime = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	gdb, err := gorm.Open(mysql.Open(cfg.FormatDSN()), gormConfig())
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	sqlDB, err := gdb.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(64)
	sqlDB.SetMaxIdleConns(64)
	sqlDB.SetConnMaxLifetime(5 * time.Minute)
	db := &DB{gdb: gdb, dialect: MySQL}
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
	gdb, err := gorm.Open(sqlite.Open(dsn), gormConfig())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", file, err)
	}
	sqlDB, err := gdb.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(1)
	db := &DB{gdb: gdb, dialect: SQLite}
	if err := db.Ping(ctx); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return db, nil
}

func gormConfig() *gorm.Config {
	return &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		PrepareStmt:            false,
	}
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
	sqlDB, err := d.gdb.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// Migrate applies the schema and seed files of sql/<dialect>/ in name order.
// Every statement in them is idempotent, so Migrate may run at every start.
func (d *DB) Migrate(ctx context.Context) error {
	dir := string(d.dialect)
	entries, err := fs.ReadDir(schema.Files, dir)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		body, err := fs.ReadFile(schema.Files, path.Join(dir, name))
		if err != nil {
			return err
		}
		for i, stmt := range splitStatements(string(body)) {
			if err := d.gdb.WithContext(ctx).Exec(stmt).Error; err != nil {
				return fmt.Errorf("migrate %s/%s statement %d: %w", dir, name, i+1, err)
			}
		}
	}
	return nil
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
