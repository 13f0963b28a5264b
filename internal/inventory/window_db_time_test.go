package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestSQLStagesDecideByTheDatabaseClock runs the stages that check the
// window in SQL against a MySQL whose clock, for this test's connections,
// stands an hour ahead of the process (the session's timestamp is set,
// which UTC_TIMESTAMP follows), so that a stage deciding by the process's
// clock gives the other answer. A sale that opened half an hour ago by the
// database's clock (half an hour to go by the process's) sells; one that
// closed half an hour ago by it (open for another half hour by the
// process's) does not.
func TestSQLStagesDecideByTheDatabaseClock(t *testing.T) {
	cfg, err := mysqldriver.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	ahead := time.Now().Add(time.Hour).Truncate(time.Second)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["timestamp"] = strconv.FormatInt(ahead.Unix(), 10)
	ctx := context.Background()
	db, err := store.OpenMySQL(ctx, cfg.FormatDSN(), store.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if now, err := db.Products().Now(ctx); err != nil || !now.Equal(ahead) {
		t.Fatalf("the database's clock reads %v (%v), want the session's %v", now, err, ahead)
	}
	var nextID atomic.Int64
	nextID.Store(8000)
	for _, sc := range stageCases {
		if sc.stage == inventory.StageRedisAtomic || sc.stage == inventory.StageRedisStream {
			continue // Redis's clock decides: TestRedisStagesDecideByRedisTime
		}
		t.Run(sc.stage, func(t *testing.T) {
			id := nextID.Add(1)
			insertItem(t, ctx, db, id, "db-time-"+sc.stage)
			st := sc.build(newRaceEnv(t), db.Products(), inventory.SectionOptions{})
			svc := inventory.NewService(db.Products(), map[string]inventory.Stage{sc.stage: st}, "i", "O")
			decidesBy(t, ctx, svc, sc.stage, id, ahead, "the database's clock")
		})
	}
}

// decidesBy checks that the stage decides the window by a reference clock
// that reads ahead, an hour past the process's: a sale that opened half
// an hour before it sells, and one that closed half an hour before it
// does not. A stage that went by the process's clock would answer both
// the other way.
func decidesBy(t *testing.T, ctx context.Context, svc *inventory.Service, stage string, id int64, ahead time.Time, clock string) {
	t.Helper()
	buy := func(user string) error {
		_, err := svc.Buy(ctx, stage, inventory.Request{ItemID: id, UserID: user, Quantity: 1})
		return err
	}
	if err := svc.ResetSale(ctx, id, 5, inventory.SaleWindow{OpensAt: ahead.Add(-30 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := buy("open"); err != nil {
		t.Fatalf("open half an hour ago by %s: %v", clock, err)
	}
	if err := svc.ResetSale(ctx, id, 5, inventory.SaleWindow{ClosesAt: ahead.Add(-30 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := buy("closed"); !errors.Is(err, inventory.ErrSaleClosed) {
		t.Fatalf("closed half an hour ago by %s: %v, want closed", clock, err)
	}
}
