package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestKeysExpireInRealTime: a key set with a TTL is gone once the TTL has
// passed on the wall clock (within a few ticks), and not before.
func TestKeysExpireInRealTime(t *testing.T) {
	r, err := StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 200*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	set := time.Now()
	if n, _ := c.Exists(ctx, "k").Result(); n != 1 {
		t.Fatal("the key must exist right after SET")
	}
	for {
		n, err := c.Exists(ctx, "k").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Since(set) > 5*time.Second {
			t.Fatal("the key never expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if age := time.Since(set); age < 200*time.Millisecond {
		t.Fatalf("the key expired early, after %v", age)
	}
}
