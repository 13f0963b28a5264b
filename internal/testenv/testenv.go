// Package testenv hands tests the real services they need: a fresh MySQL
// database, a SQLite file, or a Redis address, from the first of these
// sources that works:
//
//  1. SECKILL_TEST_MYSQL_DSN and SECKILL_TEST_REDIS_ADDR, which always win
//     (CI points them at the machine's MariaDB and Redis);
//  2. where a Docker engine answers (DOCKER_HOST, or the default socket), a
//     MySQL and a Redis container of the images docker-compose.yml runs,
//     started by testcontainers-go once per test binary on first use and
//     removed when the binary exits (-short never starts containers);
//  3. for Redis only, an embedded in-process server (internal/embedded) per
//     test. MySQL has no stand-in: those tests skip with a message.
//
// Under CI=true a missing service fails the test instead of skipping it,
// and Redis is never embedded: CI must test the real thing.
//
// Containers are removed by a small reaper process of this package (see
// reap), so Ryuk, whose image comes from a registry, is turned off unless
// TESTCONTAINERS_RYUK_DISABLED is set explicitly.
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

	"github.com/seckill-lab/seckill/internal/embedded"
	"github.com/seckill-lab/seckill/internal/lock"
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

// MySQLDSN creates a fresh database on the test MySQL server (see the
// package comment for where it comes from), drops it when the test ends,
// and returns a DSN that points at it. Without a server it skips the test
// (fails under CI=true).
func MySQLDSN(t testing.TB) string {
	t.Helper()
	raw := os.Getenv("SECKILL_TEST_MYSQL_DSN")
	if raw == "" {
		if testing.Short() {
			Unavailable(t, "SECKILL_TEST_MYSQL_DSN is not set, and -short starts no MySQL container")
		}
		var err error
		if raw, err = containerMySQL(); err != nil {
			Unavailable(t, "no MySQL: SECKILL_TEST_MYSQL_DSN is not set (e.g. root:@tcp(127.0.0.1:3306)/test), and %s", dockerHint(err))
		}
	}
	cfg, err := mysqldriver.ParseDSN(raw)
	if err != nil {
		t.Fatalf("SECKILL_TEST_MYSQL_DSN: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := store.OpenMySQL(ctx, raw, store.Pool{})
	if err != nil {
		Unavailable(t, "MySQL not reachable at %s: %v", cfg.Addr, err)
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
	return open(t, func(ctx context.Context) (*store.DB, error) { return store.OpenMySQL(ctx, MySQLDSN(t), store.Pool{}) })
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

// RedisAddr returns the address of the test Redis server (see the package
// comment for where it comes from). Outside CI it always finds one: at
// worst an embedded server of this test's own, closed when it ends.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("SECKILL_TEST_REDIS_ADDR")
	if addr == "" {
		return fallbackRedis(t)
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

// fallbackRedis is a container's Redis where Docker answers, else (outside
// CI) an embedded server for this test alone.
func fallbackRedis(t testing.TB) string {
	t.Helper()
	why := "-short starts no Redis container"
	if !testing.Short() {
		addr, err := containerRedis()
		if err == nil {
			return addr
		}
		why = dockerHint(err)
	}
	if os.Getenv("CI") == "true" {
		Unavailable(t, "no Redis: SECKILL_TEST_REDIS_ADDR is not set, and %s (CI never falls back to the embedded Redis)", why)
	}
	r, err := embedded.StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatalf("embedded Redis: %v", err)
	}
	t.Cleanup(r.Close)
	return r.Addr()
}

// Redis returns a client of the test Redis server, closed at cleanup. Its
// retries are off, as internal/lock requires (see lock.ClientOptions).
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NewLock is lock.New for a test, which fails if New refuses rdb.
func NewLock(t testing.TB, rdb redis.UniversalClient, opts lock.Options) *lock.Client {
	t.Helper()
	c, err := lock.New(rdb, opts)
	if err != nil {
		t.Fatalf("lock.New: %v", err)
	}
	return c
}

// NewRedLock is lock.NewRedLock for a test, which fails if it refuses.
func NewRedLock(t testing.TB, clients []redis.UniversalClient, opts lock.RedLockOptions) *lock.RedLock {
	t.Helper()
	r, err := lock.NewRedLock(clients, opts)
	if err != nil {
		t.Fatalf("lock.NewRedLock: %v", err)
	}
	return r
}
