//go:build unix

package idempotency_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/redisconn"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestUsedBatchOnStaleConnectionsIsAnswered: the Store's client, as the
// app's, does not check a pooled connection before use (internal/
// redisconn), and the pipelines of gathered Used reads go through a client
// that does (SetBatchClient). Every idle connection of both is closed by
// the server while one read is held in flight and six wait behind it: the
// held read may fail on a stale connection, but the six are answered,
// each with its own key's answer.
func TestUsedBatchOnStaleConnectionsIsAnswered(t *testing.T) {
	const pool, n = 2, 6
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	client := func(name string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: pool, Dialer: dial, OnConnect: testenv.NamedClientOnConnect(name)})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	storeRDB := client("used-store", redisconn.Dial)
	var checked testenv.CheckedDialer
	batchRDB := client("used-batch", checked.Dial)
	admin := client("used-admin", nil)

	s := idempotency.New(storeRDB, idempotency.Options{Prefix: "used:"})
	s.SetBatchClient(batchRDB)
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	for i := 0; i < n; i += 2 {
		if _, _, err := s.Begin(ctx, "u", "/p", fmt.Sprintf("k%d", i), fp); err != nil {
			t.Fatal(err)
		}
	}
	h := newUsedHook()
	storeRDB.AddHook(h)
	t.Cleanup(func() {
		select {
		case <-h.hold:
		default:
			close(h.hold)
		}
	})
	for _, c := range []*redis.Client{storeRDB, batchRDB} {
		testenv.WarmPool(t, c, pool)
		testenv.WarmPipelines(t, c)
	}
	r := &usedRig{t: t, s: s, hook: h}
	first := r.holdFirst(ctx) // held by the hook before it takes a connection
	outs := r.queue(ctx, n)
	killed := testenv.KillIdleClients(t, admin, &checked, pool+1, "used-store", "used-batch")
	close(h.hold)
	failed := 0
	if a := answer(t, first); a.err != nil {
		failed++ // the held read, on a stale connection of the Store's client
	}
	wantKeyAnswers(t, outs)
	if _, pipes := h.sent(); len(pipes) != 0 {
		t.Errorf("pipelines through the Store's own client %v, want none (they go through the batch client)", pipes)
	}
	t.Logf("%d of 1 held read failed; %d connections closed", failed, killed)
}
