package inventory_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestRedisStagesDecideByRedisTime runs the Redis stages against a Redis
// whose clock is an hour ahead of this process (a miniredis with its time
// set), so that a stage deciding by the process's clock, as reserve.lua's
// caller once passed it, gives the other answer. A sale that opened half an
// hour ago by Redis's clock (half an hour to go by the process's) sells; one
// that closed half an hour ago by Redis's clock (open for another half hour
// by the process's) does not.
func TestRedisStagesDecideByRedisTime(t *testing.T) {
	m := miniredis.RunT(t)
	ahead := time.Now().Add(time.Hour)
	m.SetTime(ahead)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	db := testenv.SQLite(t)
	ctx := context.Background()
	for i, stage := range []string{inventory.StageRedisAtomic, inventory.StageRedisStream} {
		t.Run(stage, func(t *testing.T) {
			id := int64(7000 + i)
			if err := db.Exec(ctx, "INSERT INTO products (id, name, initial_stock, stock) VALUES (?, 'redis-time', 5, 5)", id); err != nil {
				t.Fatal(err)
			}
			ra := redisstage.NewRedisAtomic(rdb, db.Products(), testenv.Name("rt-"), nil)
			var st inventory.Stage = ra
			if stage == inventory.StageRedisStream {
				st = redisstage.NewRedisStream(ra, redisstage.StreamOptions{})
			}
			// The opening draw reads the same clock for this stage's buyers.
			if now, err := st.(inventory.WindowClock).WindowNow(ctx, id); err != nil || !now.Equal(ahead.Truncate(time.Microsecond)) {
				t.Fatalf("the stage's window clock reads %v (%v), want Redis's, %v", now, err, ahead.Truncate(time.Microsecond))
			}
			svc := inventory.NewService(db.Products(), map[string]inventory.Stage{stage: st}, "i", "O")
			decidesBy(t, ctx, svc, stage, id, ahead, "Redis's clock")
		})
	}
}
