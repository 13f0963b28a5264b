package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestMigrationsTakeTurns: on MySQL, a Migrate waits while another session
// holds the database's migration lock, and runs no statement until it is
// let go; then it runs. The test holds the lock itself, and waits until
// the server lists the Migrate's connection as waiting for it. Once done,
// Migrate leaves the lock free.
func TestMigrationsTakeTurns(t *testing.T) {
	db := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holding, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- store.Gorm(db).WithContext(ctx).Connection(func(c *gorm.DB) error {
			var got int
			if err := c.Raw("SELECT GET_LOCK(" + store.MigrateLock + ", 10)").Scan(&got).Error; err != nil || got != 1 {
				close(holding)
				return fmt.Errorf("taking the migration lock: %d, %v", got, err)
			}
			close(holding)
			<-release
			return c.Exec("DO RELEASE_LOCK(" + store.MigrateLock + ")").Error
		})
	}()
	<-holding
	w := store.RecordWire(db)
	migrated := make(chan error, 1)
	go func() { migrated <- db.Migrate(ctx) }()

	const probe = "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() AND info LIKE 'SELECT GET_LOCK(%'"
	for waiting := false; !waiting; {
		var n int
		if err := store.Gorm(db).WithContext(ctx).Raw(probe).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-held:
			t.Fatalf("the lock's holder ended early: %v", err)
		case err := <-migrated:
			t.Fatalf("Migrate ended (%v) while another session held the migration lock", err)
		case <-ctx.Done():
			t.Fatal("Migrate never waited for the migration lock")
		case <-time.After(10 * time.Millisecond):
		}
		waiting = n == 1
	}
	for _, line := range w.Take() {
		if line != probe {
			t.Fatalf("Migrate ran %q while another session held the migration lock", line)
		}
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("Migrate after the lock was let go: %v", err)
	}
	if len(w.Take()) == 0 {
		t.Fatal("Migrate ran no statement once it had the lock")
	}
	// Its connection went back to the pool without the lock.
	var free int
	if err := store.Gorm(db).WithContext(ctx).Raw("SELECT IS_FREE_LOCK(" + store.MigrateLock + ")").Scan(&free).Error; err != nil || free != 1 {
		t.Fatalf("the migration lock after Migrate: free = %d, %v; want free", free, err)
	}
}
