package admission

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestResetWaitsOutTheLease: an instance that remembers an epoch and never
// hears the bump (paused, or its subscription dead and not yet noticed:
// here it is marked subscribed with no subscription at all) still reads
// the new epoch once the bumping instance's Settle has returned.
func TestResetWaitsOutTheLease(t *testing.T) {
	addr := testenv.StartRedis(t).Addr
	a, b := redis.NewClient(&redis.Options{Addr: addr}), redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	const lease = 300 * time.Millisecond
	deaf, bumper := NewRedisEpochs(a, a, lease), NewRedisEpochs(b, b, lease)
	deaf.drop(true) // trusts its memory, hears nothing
	ctx := context.Background()
	item := testenv.Name("epoch-item")
	old, err := deaf.Epoch(ctx, item)
	if err != nil {
		t.Fatal(err)
	}
	if err := bumper.Bump(ctx, item); err != nil {
		t.Fatal(err)
	}
	if err := bumper.Settle(ctx, item); err != nil {
		t.Fatal(err)
	}
	v, err := deaf.Epoch(ctx, item)
	if err != nil {
		t.Fatal(err)
	}
	if v == old {
		t.Fatalf("after the reset settled, an instance that missed its announcement still trusts the old epoch %q", old)
	}
}
