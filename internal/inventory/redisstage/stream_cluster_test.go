package redisstage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestStreamOrdersOfAnotherInstanceAreWrittenOnARedisCluster: on a real
// three-master Cluster, one instance queues an order for each of 20 items
// (their slots spread over the masters) and has no writer; another
// instance's writer, which no enqueue woke, finds them through the sets of
// items with work (one per slot, read with one script per master) and
// writes each once; then every item has left its set. Every script stays
// in one slot, or the Cluster refuses it.
func TestStreamOrdersOfAnotherInstanceAreWrittenOnARedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.StartRedisCluster(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	db := testenv.SQLite(t)
	const items = 20
	if _, err := db.Products().LoadCatalogue(ctx, items, 3); err != nil {
		t.Fatal(err)
	}
	ns := testenv.Name("sc-")
	stage := func() *redisstage.RedisStream {
		return redisstage.NewRedisStream(redisstage.NewRedisAtomic(rdb, db.Products(), ns, nil), redisstage.StreamOptions{})
	}
	queuer, writing := stage(), stage()
	for id := int64(1); id <= items; id++ {
		o := inventory.Order{No: fmt.Sprintf("%s-%d", ns, id), ItemID: id, UserID: "u", Quantity: 1, Stage: inventory.StageRedisStream, CreatedAt: time.Now()}
		if err := queuer.Buy(ctx, o); err != nil {
			t.Fatalf("queue item %d's order: %v", id, err)
		}
	}
	working, err := queuer.WorkingItems(ctx)
	if err != nil || len(working) != items {
		t.Fatalf("items with work: %v, %v; want the %d items", working, err, items)
	}
	streamtest.StartWriter(t, ctx, writing, db.Products(), orderwriter.Options{Poll: 20 * time.Millisecond})
	testkit.Eventually(t, "every item's order written and every item out of its set", 30*time.Second, func() bool {
		working, err := queuer.WorkingItems(ctx)
		return err == nil && len(working) == 0
	})
	for id := int64(1); id <= items; id++ {
		a, err := db.Products().Audit(ctx, id)
		if err != nil || a.Sold != 1 || !a.Conserved() {
			t.Errorf("item %d: audit %+v, %v; want 1 sold", id, a, err)
		}
		if n, _, err := queuer.Backlog(ctx, id); err != nil || n != 0 {
			t.Errorf("item %d: %d orders still queued, %v", id, n, err)
		}
	}
}
