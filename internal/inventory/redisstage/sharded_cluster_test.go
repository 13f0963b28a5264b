package redisstage_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
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
	ns, masters := spreadNamespace(t, ctx, rdb, id, shardedBuckets)
	services := make([]*inventory.Service, 3)
	for i := range services {
		st := redisstage.NewRedisSharded(rdb, db.Products(), ns, shardedBuckets, nil)
		services[i] = inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: st}, fmt.Sprintf("i%d", i), "O")
	}
	ok, soldOut := releaseAtOnce(t, raceBuyers, func(b int) error {
		_, err := services[b%3].Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: id, UserID: fmt.Sprintf("c%d", b), Quantity: 1})
		return err
	})
	a, err := db.Products().Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("buckets on %d masters: ok=%d sold-out=%d audit=%+v", masters, ok, soldOut, a)
	if ok != raceStock || a.Sold != raceStock || a.Stock != 0 || a.Oversold() != 0 || !a.Conserved() {
		t.Fatalf("%d bought, audit %+v: want exactly %d sold", ok, a, raceStock)
	}
	probe := redisstage.NewRedisSharded(rdb, db.Products(), ns, shardedBuckets, nil)
	for b := range shardedBuckets {
		k := probe.BucketKeysForTest(id, b)
		if n, err := rdb.Get(ctx, k[0]).Int(); err != nil || n != 0 || rdb.HLen(ctx, k[1]).Val() != 0 {
			t.Errorf("bucket %d after the sale: stock %d (%v), %d in flight", b, n, err, rdb.HLen(ctx, k[1]).Val())
		}
	}
}

// spreadNamespace returns a key namespace whose buckets (of n) of item id
// land on every master of the cluster (hash tags decide it, so the test
// picks the tags rather than hope), and the number of masters.
func spreadNamespace(t testing.TB, ctx context.Context, rdb *redis.ClusterClient, id int64, n int) (string, int) {
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
		probe := redisstage.NewRedisSharded(rdb, nil, ns, n, nil)
		seen := map[string]bool{}
		for b := range n {
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

// BenchmarkShardedBurstCPUPerShard measures where the Redis work of one
// hot product lands (issue 35 point 4). On a three-master Cluster it runs
// the same sale twice, every buyer getting a unit (the sale itself, not
// the post-sale wave, which the sold-out memory keeps away from Redis):
// once under redis-atomic, whose keys share one hash tag and so one
// shard, and once under redis-sharded with three buckets, one per master.
// Around each burst it reads every master's CPU (INFO CPU, user + sys) and
// reports the busiest master's, in ms, and their ratio. The orders go to
// an in-memory store, so the database is not what is measured. Two cores
// cannot show throughput scaling; this shows the work spreading.
//
//	go test -run '^$' -bench BenchmarkShardedBurstCPUPerShard -benchtime 1x ./internal/inventory/redisstage/
func BenchmarkShardedBurstCPUPerShard(b *testing.B) {
	const buyers = 20000
	ctx := context.Background()
	nodes := testenv.StartRedisCluster(b)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes, MaxRetries: -1, PoolSize: 64})
	b.Cleanup(func() { _ = rdb.Close() })
	var atomicMS, shardedMS float64
	for i := 0; i < b.N; i++ {
		for _, stage := range []string{inventory.StageRedisAtomic, inventory.StageRedisSharded} {
			st := &memStore{stock: buyers}
			ns := fmt.Sprintf("cpu%d-%d-", i, time.Now().UnixNano())
			var s inventory.Stage
			if stage == inventory.StageRedisAtomic {
				s = redisstage.NewRedisAtomic(rdb, st, ns, nil)
			} else {
				// One bucket per master: the busiest holds a third.
				ns, _ = spreadNamespace(b, ctx, rdb, 1, 3)
				s = redisstage.NewRedisSharded(rdb, st, ns, 3, nil)
			}
			svc := inventory.NewService(st, map[string]inventory.Stage{stage: s}, "b", "O")
			if err := svc.Reset(ctx, 1, buyers); err != nil {
				b.Fatal(err)
			}
			before := masterCPU(b, ctx, rdb)
			burst(b, ctx, svc, stage, buyers)
			after := masterCPU(b, ctx, rdb)
			busiest := 0.0
			for addr, v := range after {
				busiest = max(busiest, 1000*(v-before[addr]))
			}
			if sold := buyers - st.left(); sold != buyers {
				b.Fatalf("%s sold %d of %d", stage, sold, buyers)
			}
			b.Logf("%s: busiest master used %.0f ms of CPU for %d sales (per master: %v)", stage, busiest, buyers, cpuDelta(before, after))
			if stage == inventory.StageRedisAtomic {
				atomicMS += busiest
			} else {
				shardedMS += busiest
			}
		}
	}
	b.ReportMetric(atomicMS/float64(b.N), "atomic-busiest-ms")
	b.ReportMetric(shardedMS/float64(b.N), "sharded-busiest-ms")
	b.ReportMetric(shardedMS/atomicMS, "busiest-ratio")
}

// burst sends n buyers through 64 goroutines and fails on any answer but
// a sale.
func burst(b *testing.B, ctx context.Context, svc *inventory.Service, stage string, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := next.Add(1); u <= int64(n); u = next.Add(1) {
				if _, err := svc.Buy(ctx, stage, inventory.Request{ItemID: 1, UserID: fmt.Sprintf("u%d", u), Quantity: 1}); err != nil {
					b.Errorf("buyer u%d: %v", u, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// masterCPU reads each master's used_cpu_user + used_cpu_sys, in seconds.
func masterCPU(b *testing.B, ctx context.Context, rdb *redis.ClusterClient) map[string]float64 {
	out := map[string]float64{}
	var mu sync.Mutex
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		var user, sys float64
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
				user, _ = strconv.ParseFloat(v, 64)
			}
			if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
				sys, _ = strconv.ParseFloat(v, 64)
			}
		}
		mu.Lock()
		out[c.Options().Addr] = user + sys
		mu.Unlock()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func cpuDelta(before, after map[string]float64) map[string]string {
	out := map[string]string{}
	for a, v := range after {
		out[a] = fmt.Sprintf("%.0fms", 1000*(v-before[a]))
	}
	return out
}

// memStore is a store that keeps one item's stock in memory: the
// benchmark measures Redis, not a database.
type memStore struct {
	mu    sync.Mutex
	stock int
}

func (m *memStore) left() int { m.mu.Lock(); defer m.mu.Unlock(); return m.stock }

func (m *memStore) Deduct(_ context.Context, o inventory.Order) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stock < o.Quantity {
		return inventory.ErrSoldOut
	}
	m.stock -= o.Quantity
	return nil
}

func (m *memStore) Get(_ context.Context, id int64) (inventory.Item, error) {
	return inventory.Item{ID: id, Stock: m.left(), InitialStock: m.left()}, nil
}

func (m *memStore) List(ctx context.Context) ([]inventory.Item, error) {
	it, err := m.Get(ctx, 1)
	return []inventory.Item{it}, err
}

func (m *memStore) Audit(context.Context, int64) (inventory.Audit, error) {
	return inventory.Audit{}, nil
}

func (m *memStore) Reset(_ context.Context, _ int64, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stock = n
	return nil
}

func (m *memStore) FindOrder(context.Context, string) (inventory.Order, error) {
	return inventory.Order{}, inventory.ErrOrderNotFound
}

// The contract race's stock and crowd (contract_test.go in package
// inventory).
const (
	raceStock  = 50
	raceBuyers = 200
)
