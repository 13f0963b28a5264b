package lock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// oneNodeCluster starts a redis-server in cluster mode that serves every
// slot itself, and returns a cluster client of it (retries off). Scripts
// whose keys hash to different slots fail on it with CROSSSLOT, as on any
// Cluster.
func oneNodeCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	s := testenv.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-port", strconv.Itoa(testkit.FreePorts(t, 1)[0]))
	node := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer node.Close()
	ctx := context.Background()
	if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "cluster_state:ok", 20*time.Second, func() bool {
		info, err := node.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.Addr}, MaxRedirects: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Every key locks on a Cluster as on one Redis, braces included: "}sku-1"
// made the hash tag of "lock:{}sku-1}" empty, so the lock and its fence
// record landed in different slots and every Obtain failed with CROSSSLOT.
// Keys held at the same time must not share a lock.
func TestClusterKeysWithBraces(t *testing.T) {
	t.Parallel()
	rdb := oneNodeCluster(t)
	c, _ := newClient(t, rdb, lock.Options{})
	ctx := context.Background()
	keys := []string{"sku-1", "}sku-1", "}", "}}", "}{", "{}", "{", "a}b", "{a}", "~", "~}}sku-1", "~}}sku-1~", "}sku-1~", "~}", "}~"}
	var leases []*lock.Lease
	for _, key := range keys {
		l, err := c.Obtain(ctx, key, 10*time.Second, lock.ObtainOptions{Wait: 10 * time.Millisecond})
		if err != nil {
			t.Errorf("key %q: %v", key, err)
			continue
		}
		leases = append(leases, l)
	}
	// A waiter marks the lock and its fence record: both must be writable.
	if _, err := c.Obtain(ctx, "}sku-1", time.Second, lock.ObtainOptions{Wait: 20 * time.Millisecond}); err == nil {
		t.Error("a held key was obtained again")
	}
	for _, l := range leases {
		if err := l.Refresh(ctx, 10*time.Second); err != nil {
			t.Errorf("refresh %q: %v", l.Key(), err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("release %q: %v", l.Key(), err)
		}
	}
}

// A lease must not outlive its key's fence record: once the record
// expired under a held lock, the next token comes from the server clock
// alone. So a ttl above FenceTTL is refused, at Obtain and at Refresh, and
// nothing is written.
func TestTTLAboveFenceTTLIsRefused(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{FenceTTL: time.Second})
	ctx := context.Background()
	for _, wait := range []time.Duration{0, time.Second} {
		l, err := c.Obtain(ctx, "k", 2*time.Second, lock.ObtainOptions{Wait: wait})
		if err == nil {
			_ = l.Release(ctx)
			t.Fatalf("Wait %v: a 2s lease was obtained with FenceTTL 1s", wait)
		}
		if !strings.Contains(err.Error(), "FenceTTL") || errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("Wait %v: the error does not name FenceTTL, or says the lock was busy: %v", wait, err)
		}
		if isHeld(t, rdb, prefix, "k") {
			t.Fatal("a refused Obtain wrote the lock")
		}
	}
	l := mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{Fixed: true})
	if err := l.Refresh(ctx, 2*time.Second); err == nil || !strings.Contains(err.Error(), "FenceTTL") {
		t.Fatalf("a Refresh to 2s with FenceTTL 1s: %v", err)
	}
	if l.Err() != nil {
		t.Fatalf("a refused Refresh ended the lease: %v", l.Err())
	}
	mustRelease(t, l)
}
