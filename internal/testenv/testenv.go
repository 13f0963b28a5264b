// Package testenv hands tests the real services they need: a fresh MySQL
// database, a SQLite file, or a Redis address. Services come from
// SECKILL_TEST_MYSQL_DSN and SECKILL_TEST_REDIS_ADDR; without them a test is
// skipped with a message saying what to set, except under CI=true, where a
// missing service fails the run instead of hiding tests.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/store"
)

// Unavailable skips the test, or fails it under CI=true.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("required service missing under CI=true: %s", msg)
	}
	t.Skip(msg)
}

// Name returns a short random name for keys and databases.
func Name(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// MySQLDSN creates a fresh database on the SECKILL_TEST_MYSQL_DSN server,
// drops it when the test ends, and returns a DSN that points at it.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	raw := os.Getenv("SECKILL_TEST_MYSQL_DSN")
	if raw == "" {
		Unavailable(t, "set SECKILL_TEST_MYSQL_DSN (e.g. root:@tcp(127.0.0.1:3306)/test) to run MySQL tests")
	}
	cfg, err := mysqldriver.ParseDSN(raw)
	if err != nil {
		t.Fatalf("SECKILL_TEST_MYSQL_DSN: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := store.OpenMySQL(ctx, raw)
	if err != nil {
		Unavailable(t, "MySQL at SECKILL_TEST_MYSQL_DSN not reachable: %v", err)
	}
	name := Name("seckill_t_")
	if err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		if err := admin.Close(); err != nil {
			t.Errorf("close admin pool: %v", err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// MySQL returns a migrated, seeded, fresh MySQL database.
func MySQL(t testing.TB) *store.DB {
	t.Helper()
	return open(t, func(ctx context.Context) (*store.DB, error) { return store.OpenMySQL(ctx, MySQLDSN(t)) })
}

// SQLite returns a migrated, seeded SQLite database in a temporary file.
func SQLite(t testing.TB) *store.DB {
	t.Helper()
	file := filepath.Join(t.TempDir(), "seckill.db")
	return open(t, func(ctx context.Context) (*store.DB, error) { return store.OpenSQLite(ctx, file) })
}

func open(t testing.TB, openFn func(context.Context) (*store.DB, error)) *store.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := openFn(ctx)
	if err != nil {
		t.Fatalf("open database: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close database: %v", err)
		}
	})
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
}

// Backends lists the SQL backends every contract test runs against.
func Backends() []struct {
	Name string
	Open func(testing.TB) *store.DB
} {
	return []struct {
		Name string
		Open func(testing.TB) *store.DB
	}{{"sqlite", SQLite}, {"mysql", MySQL}}
}

// RedisAddr returns the address of the test Redis server.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("SECKILL_TEST_REDIS_ADDR")
	if addr == "" {
		Unavailable(t, "set SECKILL_TEST_REDIS_ADDR (e.g. 127.0.0.1:6379) to run Redis tests")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		Unavailable(t, "Redis at SECKILL_TEST_REDIS_ADDR=%s not reachable: %v", addr, err)
	}
	return addr
}

// Redis returns a client of the test Redis server, closed at cleanup.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
