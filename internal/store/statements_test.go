package store

import (
	"reflect"
	"slices"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// dryRun opens a gorm DB of the named dialect that builds statements but
// runs none, configured as the store's own. MySQL needs no server for that
// (SkipInitializeWithVersion, no ping); SQLite runs in memory.
func dryRun(t *testing.T, dialect Dialect) *gorm.DB {
	t.Helper()
	var d gorm.Dialector
	switch dialect {
	case MySQL:
		d = mysql.New(mysql.Config{SkipInitializeWithVersion: true})
	case SQLite:
		d = sqlite.Open(":memory:")
	}
	cfg := gormConfig()
	cfg.DryRun = true
	cfg.DisableAutomaticPing = true // gorm.Open would dial MySQL otherwise
	gdb, err := openGorm(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := gdb.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	return gdb
}

// built is the statement gorm built last on a dry-run DB.
type built struct {
	sql  string
	vars []any
}

// capture records every statement gorm builds on gdb.
func capture(t *testing.T, gdb *gorm.DB) *built {
	t.Helper()
	var last built
	record := func(db *gorm.DB) {
		last = built{sql: db.Statement.SQL.String(), vars: slices.Clone(db.Statement.Vars)}
	}
	cb := gdb.Callback()
	for _, err := range []error{
		cb.Query().After("gorm:query").Register("test:capture", record),
		cb.Update().After("gorm:update").Register("test:capture", record),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return &last
}

// TestGuardedSQL pins the statements the stages teach, as gorm builds them
// on both engines: db-atomic's guarded decrement, the lock stages' read and
// naive computed write, and the fence. A workshop reads these lines; a
// gorm upgrade or a refactor that changes them must show up here.
func TestGuardedSQL(t *testing.T) {
	const id, q, n, token = 7, 2, 5, 9
	guarded := []struct {
		name    string
		run     func(st statements, tx *gorm.DB)
		product string
		coupon  string
		vars    []any
	}{
		{
			name:    "db-atomic guarded decrement",
			run:     func(st statements, tx *gorm.DB) { st.deduct(tx, id, q, "") },
			product: "UPDATE `products` SET `fence_token`=fence_token + 1,`stock`=stock - ? WHERE id = ? AND stock >= ?",
			coupon:  "UPDATE `coupon_batches` SET `fence_token`=fence_token + 1,`remaining`=remaining - ? WHERE id = ? AND remaining >= ?",
			vars:    []any{q, int64(id), q},
		},
		{
			name:    "db-atomic guarded decrement in the sale window, on MySQL's clock",
			run:     func(st statements, tx *gorm.DB) { st.deduct(tx, id, q, clock{MySQL}.inWindow()) },
			product: "UPDATE `products` SET `fence_token`=fence_token + 1,`stock`=stock - ? WHERE (id = ? AND stock >= ?) AND ((opens_at IS NULL OR opens_at <= UTC_TIMESTAMP(6)) AND (closes_at IS NULL OR closes_at > UTC_TIMESTAMP(6)))",
			coupon:  "UPDATE `coupon_batches` SET `fence_token`=fence_token + 1,`remaining`=remaining - ? WHERE (id = ? AND remaining >= ?) AND ((opens_at IS NULL OR opens_at <= UTC_TIMESTAMP(6)) AND (closes_at IS NULL OR closes_at > UTC_TIMESTAMP(6)))",
			vars:    []any{q, int64(id), q},
		},
		{
			name:    "naive computed write",
			run:     func(st statements, tx *gorm.DB) { st.setStock(tx, id, n, 0) },
			product: "UPDATE `products` SET `fence_token`=fence_token + 1,`stock`=? WHERE id = ?",
			coupon:  "UPDATE `coupon_batches` SET `fence_token`=fence_token + 1,`remaining`=? WHERE id = ?",
			vars:    []any{n, int64(id)},
		},
		{
			name:    "fenced computed write",
			run:     func(st statements, tx *gorm.DB) { st.setStock(tx, id, n, token) },
			product: "UPDATE `products` SET `stock`=? WHERE id = ? AND `fence_token` <= ?",
			coupon:  "UPDATE `coupon_batches` SET `remaining`=? WHERE id = ? AND `fence_token` <= ?",
			vars:    []any{n, int64(id), int64(token)},
		},
		{
			name:    "fence claim",
			run:     func(st statements, tx *gorm.DB) { st.claim(tx, id, token) },
			product: "UPDATE `products` SET `fence_token`=? WHERE id = ? AND `fence_token` < ?",
			coupon:  "UPDATE `coupon_batches` SET `fence_token`=? WHERE id = ? AND `fence_token` < ?",
			vars:    []any{int64(token), int64(id), int64(token)},
		},
	}
	// The read differs between the engines only in how LIMIT 1 is bound.
	reads := map[Dialect]struct {
		product, coupon string
		vars            []any
	}{
		MySQL:  {"SELECT `stock` FROM `products` WHERE `products`.`id` = ? LIMIT ?", "SELECT `remaining` FROM `coupon_batches` WHERE `coupon_batches`.`id` = ? LIMIT ?", []any{int64(id), 1}},
		SQLite: {"SELECT `stock` FROM `products` WHERE `products`.`id` = ? LIMIT 1", "SELECT `remaining` FROM `coupon_batches` WHERE `coupon_batches`.`id` = ? LIMIT 1", []any{int64(id)}},
	}

	for _, dialect := range []Dialect{MySQL, SQLite} {
		t.Run(string(dialect), func(t *testing.T) {
			gdb := dryRun(t, dialect)
			last := capture(t, gdb)
			check := func(name string, st statements, run func(statements, *gorm.DB), sql string, vars []any) {
				t.Helper()
				*last = built{}
				run(st, gdb.Session(&gorm.Session{}))
				if last.sql != sql || !reflect.DeepEqual(last.vars, vars) {
					t.Errorf("%s (%T):\n got %s %v\nwant %s %v", name, st, last.sql, last.vars, sql, vars)
				}
			}
			for _, s := range guarded {
				check(s.name, productStatements{}, s.run, s.product, s.vars)
				check(s.name, couponStatements{}, s.run, s.coupon, s.vars)
			}
			read := func(st statements, tx *gorm.DB) { _, _ = st.readStock(tx, id) }
			r := reads[dialect]
			check("stock read", productStatements{}, read, r.product, r.vars)
			check("stock read", couponStatements{}, read, r.coupon, r.vars)
		})
	}
}
