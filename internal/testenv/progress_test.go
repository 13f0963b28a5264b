package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// TestWaitReplicaSyncedFollowsASlowSync: a replica whose full sync takes
// longer than the fixed bound the group's waits used to have (30 s), but
// moves all the while, is waited for, as on a machine whose cores are all
// taken: the wait follows the sync's bytes and offsets, not the clock. The
// primary saves each of 3500 keys 10 ms apart (rdb-key-save-delay, in
// microseconds), so the sync cannot take less than 35 s.
func TestWaitReplicaSyncedFollowsASlowSync(t *testing.T) {
	const keys = 3500
	primary := StartRedis(t, "--repl-diskless-sync-delay", "0", "--rdb-key-save-delay", "10000")
	c := plainClient(primary.Addr)
	defer c.Close()
	c.Options().ReadTimeout = 0 // go-redis's default (3 s)
	ctx := t.Context()
	pipe := c.Pipeline()
	value := strings.Repeat("x", 100)
	for i := range keys {
		pipe.Set(ctx, fmt.Sprintf("key-%d", i), value, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	replica := StartReplicaOf(t, primary) // waits with WaitReplicaSynced
	rc := plainClient(replica.Addr)
	defer rc.Close()
	if n, err := rc.DBSize(ctx).Result(); err != nil || n != keys {
		t.Fatalf("the synced replica holds %d keys (%v), want %d", n, err, keys)
	}
}
