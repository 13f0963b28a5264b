package store

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"

	"gorm.io/gorm"

	schema "github.com/seckill-lab/seckill/sql"
)

// Migrate applies the schema and seed files of sql/<dialect>/ in name order.
// Every statement in them is idempotent, so Migrate may run at every start.
//
// On MySQL it runs on one connection that holds a named lock (one per
// database) for the whole run: instances that start together migrate one
// after another, and the later ones find each change made (applied)
// instead of making it again; a MODIFY COLUMN rebuilds its table, and on
// MySQL 8 holds the table's writes while it does.
func (d *DB) Migrate(ctx context.Context) error {
	return d.gdb.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		m := migrator{db: d, conn: conn}
		if d.dialect == MySQL {
			if err := m.lock(); err != nil {
				return err
			}
			defer m.unlock()
		}
		return m.apply()
	})
}

// migrateLockWait is how long, in seconds, Migrate waits for another
// instance's migration to end.
const migrateLockWait = 300

// migrateLock is the name of the migration lock of the connection's
// database, in SQL: a digest of the database's name, since lock names are
// at most 64 characters on MySQL and the lock is server-wide.
const migrateLock = "CONCAT('seckill-migrate-', MD5(DATABASE()))"

// migrator runs one Migrate on one connection.
type migrator struct {
	db   *DB
	conn *gorm.DB // a single connection, with Migrate's context
}

// lock takes the migration lock of the connection's database.
func (m migrator) lock() error {
	var got *int64
	err := m.conn.Raw("SELECT GET_LOCK("+migrateLock+", ?)", migrateLockWait).Scan(&got).Error
	switch {
	case err != nil:
		return translate(fmt.Errorf("take the migration lock: %w", err))
	case got == nil || *got != 1:
		return fmt.Errorf("take the migration lock: another instance has been migrating this database for %d s; retry when it is done", migrateLockWait)
	}
	return nil
}

// unlock lets the next instance migrate. It runs even when Migrate's
// context has ended: the connection goes back to the pool, not away, and
// would keep the lock for as long as it lives.
func (m migrator) unlock() {
	ctx := context.WithoutCancel(m.conn.Statement.Context)
	m.conn.WithContext(ctx).Exec("DO RELEASE_LOCK(" + migrateLock + ")")
}

func (m migrator) apply() error {
	dir := string(m.db.dialect)
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
			done, err := m.applied(stmt)
			if err == nil && !done {
				m.db.record(stmt)
				err = m.conn.Exec(stmt).Error
				if err != nil && m.racedTo(stmt) {
					err = nil // another instance, migrating at the same start, added it first
				}
			}
			if err != nil {
				return fmt.Errorf("migrate %s/%s statement %d: %w", dir, name, i+1, err)
			}
		}
	}
	return nil
}

// The kinds of schema change that neither MySQL 8 nor SQLite can make
// idempotent in SQL (MySQL 8 has no ADD COLUMN IF NOT EXISTS or CREATE
// INDEX IF NOT EXISTS), or that would rebuild a table at every start
// (MODIFY COLUMN). Migrate looks in the catalog instead, so the same files
// upgrade an old database and leave a current one alone.
var (
	addColumn   = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)\b`)
	createIndex = regexp.MustCompile(`(?is)^\s*CREATE\s+INDEX\s+(\w+)\s+ON\s+(\w+)\b`)
	// modifyColumn is a MODIFY COLUMN of exactly this shape, and nothing
	// else in the statement (MySQL only), where the collation may be named
	// in version comments (sql/mysql/004_exact_user_ids.sql):
	// ALTER TABLE t MODIFY COLUMN c VARCHAR(64) CHARACTER SET cs COLLATE co NOT NULL
	modifyColumn = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(\w+)\s+MODIFY\s+COLUMN\s+(\w+)\s+(VARCHAR\(\d+\))\s+CHARACTER\s+SET\s+(\w+)\s+((?:/\*M?!\d+\s+COLLATE\s+\w+\s*\*/\s*|COLLATE\s+\w+\s+)+)NOT\s+NULL\s*$`)
)

// applied reports whether stmt adds a column or an index that exists
// already, or gives a column the very definition it has.
func (m migrator) applied(stmt string) (bool, error) {
	if x := addColumn.FindStringSubmatch(stmt); x != nil {
		return m.hasColumn(x[1], x[2])
	}
	if x := createIndex.FindStringSubmatch(stmt); x != nil {
		return m.hasIndex(x[2], x[1])
	}
	if x := modifyColumn.FindStringSubmatch(stmt); x != nil && m.db.dialect == MySQL {
		// The server says which collation the clause names on it: the
		// version comments are its to read. The regexp lets only a
		// character set's name and COLLATE clauses through.
		collation := "COLLATION(CONVERT('' USING " + x[4] + ") " + x[5] + ")"
		return m.count("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ? AND LOWER(column_type) = LOWER(?) AND character_set_name = ? AND collation_name = "+collation+" AND is_nullable = 'NO'",
			x[1], x[2], x[3], x[4])
	}
	return false, nil
}

// racedTo reports whether a failed stmt failed only because the column or
// index it adds appeared in the meantime: two instances that migrate at
// once on SQLite (MySQL's take turns) both try, and one loses.
func (m migrator) racedTo(stmt string) bool {
	if !addColumn.MatchString(stmt) && !createIndex.MatchString(stmt) {
		return false
	}
	done, err := m.applied(stmt)
	return err == nil && done
}

func (m migrator) hasColumn(table, column string) (bool, error) {
	q := "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?"
	if m.db.dialect == SQLite {
		q = "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?"
	}
	return m.count(q, table, column)
}

func (m migrator) hasIndex(table, index string) (bool, error) {
	q := "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ?"
	if m.db.dialect == SQLite {
		q = "SELECT COUNT(*) FROM pragma_index_list(?) WHERE name = ?"
	}
	return m.count(q, table, index)
}

func (m migrator) count(q string, args ...any) (bool, error) {
	var n int64
	if err := m.conn.Raw(q, args...).Scan(&n).Error; err != nil {
		return false, fmt.Errorf("read the schema catalog: %w", err)
	}
	return n > 0, nil
}
