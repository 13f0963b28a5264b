package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestShardedExactSaleOnARedisCluster runs redis-sharded on a real
// three-master Redis Cluster (redis-server processes in cluster mode,
// through go-redis's ClusterClient), with the item's four buckets on all
// three masters: three instances, 200 buyers released at once on 50 units.
// Every script must stay inside one slot (no CROSSSLOT), and the sale must
// be exact. Skipped where redis-server is missing, except under CI=true.
func TestShardedExactSaleOnARedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := testenv.StartRedisCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	db := testenv.SQLite(t)
	id := int64(1)
	if err := db.Products().Reset(ctx, id, raceStock); err != nil {
		t.Fatal(err)
	}
	ns, masters := spreadNamespace(t, ctx, rdb, id)
	services := make([]*inventory.Service, 3)
	for i := range services {
		st := inventory.NewRedisSharded(rdb, db.Products(), ns, shardedBuckets, nil)
		services[i] = inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: st}, fmt.Sprintf("i%d", i), "O")
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var ok, soldOut atomic.Int64
	for b := range raceBuyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := services[b%3].Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: id, UserID: fmt.Sprintf("c%d", b), Quantity: 1})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, inventory.ErrSoldOut):
				soldOut.Add(1)
			default:
				t.Errorf("buyer c%d: %v", b, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	a, err := db.Products().Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("buckets on %d masters: ok=%d sold-out=%d audit=%+v", masters, ok.Load(), soldOut.Load(), a)
	if ok.Load() != raceStock || a.Sold != raceStock || a.Stock != 0 || a.Oversold() != 0 || !a.Conserved() {
		t.Fatalf("%d bought, audit %+v: want exactly %d sold", ok.Load(), a, raceStock)
	}
	probe := inventory.NewRedisSharded(rdb, db.Products(), ns, shardedBuckets, nil)
	for b := range shardedBuckets {
		k := probe.BucketKeysForTest(id, b)
		if n, err := rdb.Get(ctx, k[0]).Int(); err != nil || n != 0 || rdb.HLen(ctx, k[1]).Val() != 0 {
			t.Errorf("bucket %d after the sale: stock %d (%v), %d in flight", b, n, err, rdb.HLen(ctx, k[1]).Val())
		}
	}
}

// spreadNamespace returns a key namespace whose buckets of item id land on
// every master of the cluster (hash tags decide it, so the test picks the
// tags rather than hope), and the number of masters.
func spreadNamespace(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, id int64) (string, int) {
	t.Helper()
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := func(slot int64) string {
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) {
				return r.Nodes[0].Addr
			}
		}
		t.Fatalf("no master serves slot %d", slot)
		return ""
	}
	masters := map[string]bool{}
	for _, r := range slots {
		masters[r.Nodes[0].Addr] = true
	}
	for try := range 200 {
		ns := fmt.Sprintf("%s%d-", testenv.Name("cl-"), try)
		probe := inventory.NewRedisSharded(rdb, nil, ns, shardedBuckets, nil)
		seen := map[string]bool{}
		for b := range shardedBuckets {
			slot, err := rdb.ClusterKeySlot(ctx, probe.BucketKeysForTest(id, b)[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			seen[owner(slot)] = true
		}
		if len(seen) == len(masters) {
			return ns, len(masters)
		}
	}
	t.Fatal("no namespace of 200 spread the buckets over every master")
	return "", 0
}
