package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestSellOutIsHeardOnARedisCluster: on a three-master Cluster, where a
// PUBLISH reaches the subscribers of every node, a sell-out announced by
// one instance is heard by another under the epoch it read from the
// item's node, for items whose epochs may live on different masters.
func TestSellOutIsHeardOnARedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := testenv.StartRedisCluster(t)
	ctx := context.Background()
	instance := func() *admission.RedisEpochs {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		e := admission.NewRedisEpochs(rdb, rdb, time.Minute)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); e.Watch(wctx) }()
		t.Cleanup(func() { cancel(); <-done })
		testkit.Eventually(t, "the epoch subscription is up", 20*time.Second, e.Subscribed)
		return e
	}
	a, b := instance(), instance()
	type sellOut struct{ item, stage, epoch string }
	got := make(chan sellOut, 8)
	b.OnSoldOut(func(item, stage, epoch string, _ int) { got <- sellOut{item, stage, epoch} })
	prefix := testenv.Name("cluster-push")
	for _, item := range []string{prefix + ":1", prefix + ":2", prefix + ":3"} {
		seen, err := a.Epoch(ctx, item)
		if err != nil {
			t.Fatal(err)
		}
		want, err := b.Epoch(ctx, item)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.AnnounceSoldOut(ctx, item, "redis-lock", seen, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != (sellOut{item, "redis-lock", want}) {
				t.Fatalf("B heard %+v, want %s sold out by redis-lock under %s", s, item, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("B heard no sell-out of %s in 20 s", item)
		}
	}
}
