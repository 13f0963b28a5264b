//go:build unix

package redisstage_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/redisconn"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestBatchOnStaleConnectionsCostsNoBuyer: the stage's client, as the
// app's, does not check a pooled connection before use (internal/
// redisconn), and the batches of reservation scripts go through a client
// that does (SetBatchClient). Every idle connection of both is closed by
// the server while two lone scripts are held and a batch waits behind
// them: the lone buyers may each lose their script to a stale connection,
// but the batch is not sent on one, so every buyer of the batch buys, and
// no more buyers fail than connections were closed.
func TestBatchOnStaleConnectionsCostsNoBuyer(t *testing.T) {
	const stock, n = 20, 6
	// Each client holds two idle connections in its pool and one in its
	// pool for pipelines (go-redis keeps one apart), where the batch
	// goes: the two lone scripts and, were it sent through the stage's
	// client, the batch each take a stale connection.
	const pool = 2
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	client := func(name string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: pool, Dialer: dial, OnConnect: testenv.NamedClientOnConnect(name)})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	stageRDB := client("rb-stage", redisconn.Dial)
	// go-redis's own dialer, whose connections it checks before use; the
	// test keeps them, to see the server's close arrive before the batch.
	var checked testenv.CheckedDialer
	batchRDB := client("rb-batch", checked.Dial)
	admin := client("rb-admin", nil)

	e := &streamtest.Env{DB: testenv.SQLite(t), RDB: admin, NS: testenv.Name("s-"), ID: 1}
	if err := e.DB.Products().Reset(ctx, e.ID, stock); err != nil {
		t.Fatal(err)
	}
	ra := redisstage.NewRedisAtomic(stageRDB, e.DB.Products(), e.NS, nil)
	ra.SetBatchClient(batchRDB)
	if err := ra.Reset(ctx, e.ID, 0); err != nil {
		t.Fatal(err)
	}
	gate := newScriptGate(t, stageRDB, 2)
	batchRDB.AddHook(gate) // counts the batch's pipeline there
	be := &batchEnv{Env: e, ra: ra, gate: gate}
	for _, c := range []*redis.Client{stageRDB, batchRDB} {
		testenv.WarmPool(t, c, pool)
		testenv.WarmPipelines(t, c)
	}

	lone, queued := be.inFlight(t, ctx, n, func(int) context.Context { return ctx })
	// The held lone scripts have not taken a connection yet (the hook
	// runs before): every pooled connection is idle.
	killed := testenv.KillIdleClients(t, admin, &checked, pool+1, "rb-stage", "rb-batch")

	close(gate.release)
	failed := 0
	for i, done := range lone {
		if err := <-done; err != nil {
			if !errors.Is(err, inventory.ErrUnavailable) {
				t.Errorf("lone buyer %d: %v, want bought or unavailable", i, err)
			}
			failed++
		}
	}
	sold := len(lone) - failed
	for i, done := range queued {
		if err := <-done; err != nil {
			t.Errorf("buyer q%d of the batch: %v, want bought", i, err)
			failed++
			continue
		}
		sold++
	}
	if failed > killed {
		t.Errorf("%d buyers failed for %d closed connections, want at most one each", failed, killed)
	}
	if got := gate.pipelines(); fmt.Sprint(got) != fmt.Sprintf("[%d]", n) {
		t.Errorf("pipelines of reservation scripts %v, want one of %d", got, n)
	}
	// A confirm sent on the stage client's last stale connection fails
	// like any lost confirm, and the reconcile job settles it.
	if err := ra.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ra.Repair(ctx, e.ID, 0, e.DB.Products().OrderExists); err != nil {
		t.Fatalf("repair: %v", err)
	}
	be.checkStock(t, sold, stock)
	t.Logf("%d buyers failed, %d bought, %d connections closed", failed, sold, killed)
}
