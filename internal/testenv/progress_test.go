package testenv

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"
)

// TestWaitReplicaSyncedFollowsASlowSync: a replica whose full sync takes
// several times longer than the wait lets it stand still, but moves all
// the while, is waited for, as on a machine whose cores are all taken:
// the wait follows the sync's bytes and offsets, not the clock. (The waits
// once had a fixed bound of 30 s, which such a sync outlived.) The primary
// saves each of 400 keys 10 ms apart (rdb-key-save-delay, in
// microseconds), so the sync cannot take less than 4 s, four times the
// second the wait here allows without progress. Each value is 8 KiB of
// random bytes, which the copy cannot compress, so the bytes the replica
// has read move every key or two (of repeated letters, it read a few
// kilobytes a second and moved once in seconds).
func TestWaitReplicaSyncedFollowsASlowSync(t *testing.T) {
	if testing.Short() {
		t.Skip("a full sync made to last at least 4 s; left to the full tier")
	}
	t.Parallel()
	const keys, still = 400, time.Second
	primary := StartRedis(t, "--repl-diskless-sync-delay", "0", "--rdb-key-save-delay", "10000")
	c := plainClient(primary.Addr)
	defer c.Close()
	c.Options().ReadTimeout = 0 // go-redis's default (3 s)
	ctx := t.Context()
	pipe := c.Pipeline()
	for i := range keys {
		value := make([]byte, 8<<10)
		_, _ = rand.Read(value)
		pipe.Set(ctx, fmt.Sprintf("key-%d", i), value, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	replica := startReplicaOf(t, primary)
	waitReplicaSynced(t, replica, still)
	rc := plainClient(replica.Addr)
	defer rc.Close()
	if n, err := rc.DBSize(ctx).Result(); err != nil || n != keys {
		t.Fatalf("the synced replica holds %d keys (%v), want %d", n, err, keys)
	}
}
