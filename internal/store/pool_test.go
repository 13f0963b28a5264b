package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// openPool opens a migrated MySQL database of its own with the given pool
// bounds.
func openPool(t *testing.T, pool store.Pool) *store.DB {
	t.Helper()
	return openMySQL(t, testenv.MySQLDSN(t), pool)
}

// TestPoolWaitEndsAtTheDeadline: with every pooled connection taken, a
// purchase waits for one only as long as its context allows, then fails
// with context.DeadlineExceeded (which the API answers 503 timeout) having
// written nothing; once the connection is back, the next purchase goes
// through.
func TestPoolWaitEndsAtTheDeadline(t *testing.T) {
	db := openPool(t, store.Pool{MaxConns: 1})
	sqlDB, err := store.Gorm(db).DB()
	if err != nil {
		t.Fatal(err)
	}
	held, err := sqlDB.Conn(context.Background()) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- db.Products().Deduct(ctx, order("pool-wait-1", "waiter", 1)) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a purchase waiting for a pooled connection outlived its deadline by 30s")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for a connection past the deadline: %v, want context.DeadlineExceeded", err)
	}
	if w := sqlDB.Stats().WaitCount; w == 0 {
		t.Fatalf("the purchase never waited for the pool (WaitCount 0): the test did not hold the only connection")
	}

	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Products().Deduct(context.Background(), order("pool-wait-2", "next", 1)); err != nil {
		t.Fatalf("after the connection came back: %v", err)
	}
	a, err := db.Products().Audit(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != 1 || a.Stock != a.InitialStock-1 {
		t.Fatalf("the timed-out purchase must write nothing: %+v", a)
	}
}

// TestPoolClosesConnectionsPastTheirLifetime: Pool.MaxLifetime (from
// SECKILL_MYSQL_CONN_LIFETIME) reaches the pool, so connections are
// replaced after it and a failover is picked up.
func TestPoolClosesConnectionsPastTheirLifetime(t *testing.T) {
	db := openPool(t, store.Pool{MaxConns: 2, MaxLifetime: 50 * time.Millisecond})
	sqlDB, err := store.Gorm(db).DB()
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "a connection closed for its age", 30*time.Second, func() bool {
		if err := db.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		return sqlDB.Stats().MaxLifetimeClosed > 0
	})
}
