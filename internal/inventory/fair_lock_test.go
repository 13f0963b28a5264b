package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestRedisLockFairSellsToTheFirstComers: redis-lock with Fair on three
// instances, the item's lock held while six buyers arrive one after
// another (each only once the one before stands in the lock's line in
// Redis), then let go: the three units go to the first three buyers,
// whichever instance each came to. Without Fair, buyers of one instance
// wait for their turn in that instance before they reach Redis, and the
// instances' next buyers race on each release.
func TestRedisLockFairSellsToTheFirstComers(t *testing.T) {
	db := testenv.SQLite(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id, stock, buyers = 7301, 3, 6
	if err := db.Exec(ctx, "INSERT INTO products (id, name, initial_stock, stock) VALUES (?, ?, ?, ?)", id, "fair", stock, stock); err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Name("fair") + ":"
	var lockers []*lock.Client
	var services []*inventory.Service
	for i := range 3 {
		l := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix})
		t.Cleanup(func() { _ = l.Close() })
		lockers = append(lockers, l)
		stage := inventory.NewRedisLock(l, db.Products(), "product", inventory.SectionOptions{Fencing: true},
			inventory.LockOptions{TTL: 5 * time.Second, Wait: time.Minute, Fair: true})
		services = append(services, inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-lock": stage}, fmt.Sprintf("i%d", i), "O"))
	}
	key := fmt.Sprintf("product:%d", id)
	line := prefix + "{" + key + "}:queue"
	t.Cleanup(func() {
		rdb.Del(context.Background(), prefix+"{"+key+"}", prefix+"{"+key+"}:fence", line, line+":until", prefix+"{"+key+"}:waiting")
	})
	holder, err := lockers[0].Obtain(ctx, key, 5*time.Second, lock.ObtainOptions{Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	results := make([]chan error, buyers)
	for b := range buyers {
		results[b] = make(chan error, 1)
		go func() {
			_, err := services[b%3].Buy(ctx, "redis-lock", inventory.Request{ItemID: id, UserID: fmt.Sprintf("u%d", b), Quantity: 1})
			results[b] <- err
		}()
		testkit.Eventually(t, fmt.Sprintf("buyer %d to stand in line", b), 30*time.Second, func() bool {
			return rdb.ZCard(ctx, line).Val() == int64(b+1)
		})
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var won []int
	for b, r := range results {
		switch err := <-r; {
		case err == nil:
			won = append(won, b)
		case errors.Is(err, inventory.ErrSoldOut):
		default:
			t.Errorf("buyer %d: %v", b, err)
		}
	}
	if want := []int{0, 1, 2}; !slices.Equal(won, want) {
		t.Fatalf("units went to buyers %v, want the first %d to arrive %v", won, stock, want)
	}
}
