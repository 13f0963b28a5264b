package idempotency_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// BenchmarkKeyRecordReplicas: what a keyed request's record costs, claim
// and stored answer, on a primary with a replica in sync, without
// Options.Replicas (records replicated asynchronously) and with it (the
// claim and the settle each wait for the replica), 32 in flight. Both
// sub-benchmarks run on the same pair in the same run: compare them as a
// ratio.
func BenchmarkKeyRecordReplicas(b *testing.B) {
	primary, _ := testenv.StartReplicaPair(b)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, MaxRetries: -1})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	var next atomic.Int64 // every request a key of its own
	for _, replicas := range []int{0, 1} {
		s := idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("idem-bench") + ":", Replicas: replicas, ReplicaWait: 5 * time.Second})
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			b.SetParallelism(16) // 32 requests in flight on two cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprint(next.Add(1))
					c, _, err := s.Begin(ctx, "u", "/p", key, fp)
					if err != nil || c == nil {
						b.Errorf("claim of a new key: %v", err)
						return
					}
					if err := s.Finish(ctx, c, idempotency.Response{Status: 201, Body: []byte("{}")}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
