package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// countingClient is a client of the test Redis that counts the commands it
// sends, lists those sent on behalf of a marked request, and keeps the
// server-side id of its last connection. Hand a server its Client: the
// idempotency store recognises a plain *redis.Client as its own.
type countingClient struct {
	*redis.Client
	sent atomic.Int64
	mu   sync.Mutex
	id   int64
	// sentNames are the commands sent since the last names().
	sentNames []string
}

// Its connections ask CLIENT ID, which the embedded Redis lacks: give it a
// real server (testenv.StartRedis), or -short runs without SECKILL_TEST_*
// variables fail.
func newCountingClient(t *testing.T, addr string) *countingClient {
	t.Helper()
	c := &countingClient{}
	c.Client = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
		id, err := cn.ClientID(ctx).Result()
		c.mu.Lock()
		c.id = id
		c.mu.Unlock()
		return err
	}})
	c.AddHook(counter{c})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (c *countingClient) lastID() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.id }

// buyerMark marks the context of a request the test sends, so that names
// lists the commands sent on a request's behalf, not those of background
// work (the order writer's reads).
type buyerMark struct{}

// names returns the commands sent on a marked request's behalf since the
// last call, each as its name and first argument.
func (c *countingClient) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.sentNames
	c.sentNames = nil
	return out
}

func (c *countingClient) saw(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		n := cmd.Name()
		if args := cmd.Args(); len(args) > 1 {
			n += " " + fmt.Sprint(args[1])
		}
		c.sentNames = append(c.sentNames, n)
	}
}

type counter struct{ c *countingClient }

func (counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.sent.Add(1)
		if ctx.Value(buyerMark{}) != nil {
			h.c.saw(cmd)
		}
		return next(ctx, cmd)
	}
}

func (h counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.c.sent.Add(int64(len(cmds)))
		if ctx.Value(buyerMark{}) != nil {
			h.c.saw(cmds...)
		}
		return next(ctx, cmds)
	}
}

// watching starts e's subscription for the test and waits until it is up.
func watching(t *testing.T, e *admission.RedisEpochs) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Watch(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testkit.Eventually(t, "the epoch subscription is up", 10*time.Second, e.Subscribed)
}

// TestEpochsAnswerFromMemoryUntilAnnounced: once an instance has read an
// item's epoch, asking again costs no round trip; a bump on another
// instance is announced, and the first drops its memory without waiting
// for the lease (a minute here).
func TestEpochsAnswerFromMemoryUntilAnnounced(t *testing.T) {
	addr := testenv.StartRedis(t).Addr
	a, b := newCountingClient(t, addr), newCountingClient(t, addr)
	ea, eb := admission.NewRedisEpochs(a, a, time.Minute), admission.NewRedisEpochs(b, b, time.Minute)
	watching(t, ea)
	ctx := context.Background()
	item := testenv.Name("epoch-item")
	first, err := ea.Epoch(ctx, item)
	if err != nil {
		t.Fatal(err)
	}
	before := a.sent.Load()
	for range 1000 {
		if v, err := ea.Epoch(ctx, item); err != nil || v != first {
			t.Fatalf("epoch from memory: %q, %v; want %q", v, err, first)
		}
	}
	if n := a.sent.Load() - before; n != 0 {
		t.Fatalf("1000 reads of a remembered epoch sent %d commands; want 0", n)
	}
	if err := eb.Bump(ctx, item); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "instance a drops the bumped epoch", 10*time.Second, func() bool {
		v, err := ea.Epoch(ctx, item)
		return err == nil && v != first
	})
}

// TestEpochsDroppedWithTheSubscription: an announcement sent while an
// instance's subscription is down never reaches it. So losing the
// subscription drops every remembered epoch: here the subscription is
// killed and the epoch changed without an announcement, and the instance
// must still come to read the new one well before its minute-long lease.
func TestEpochsDroppedWithTheSubscription(t *testing.T) {
	addr := testenv.StartRedis(t).Addr
	a, sub, admin := newCountingClient(t, addr), newCountingClient(t, addr), newCountingClient(t, addr)
	e := admission.NewRedisEpochs(a, sub, time.Minute)
	watching(t, e)
	ctx := context.Background()
	item := testenv.Name("epoch-item")
	first, err := e.Epoch(ctx, item)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ClientKillByFilter(ctx, "ID", strconv.FormatInt(sub.lastID(), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, admission.EpochKey(item), "changed-unannounced", 0).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the instance reads the epoch changed while it was not subscribed", 10*time.Second, func() bool {
		v, err := e.Epoch(ctx, item)
		return err == nil && strings.HasPrefix(v, "changed-unannounced/") && v != first
	})
}

// TestSoldOutFromMemoryCostsNoRoundTrip: once an instance has seen an item
// sold out, a keyless buyer of it is answered 409 with no command sent to
// Redis, in every safe stage that uses Redis, until a reset; then the item
// sells again on the same instance at once.
func TestSoldOutFromMemoryCostsNoRoundTrip(t *testing.T) {
	skipShort(t)
	rdb := newCountingClient(t, testenv.StartRedis(t).Addr)
	send := soloInstance(t, rdb.Client)
	call := func(method, path, body string) (int, string) { return send(method, path, body, "") }
	const lease = soloLease
	for _, stage := range []string{inventory.StageRedisLock, inventory.StageDBAtomic, inventory.StageRedisAtomic, inventory.StageRedisStream} {
		t.Run(stage, func(t *testing.T) {
			if code, body := call("PUT", "/api/v1/admin/stage", fmt.Sprintf(`{"stage":%q}`, stage)); code != 200 {
				t.Fatalf("stage switch: %d %s", code, body)
			}
			if code, body := call("POST", "/api/v1/admin/products/2/reset", `{"stock":1}`); code != 200 {
				t.Fatalf("reset: %d %s", code, body)
			}
			buy := func(user string) int {
				code, body := call("POST", "/api/v1/products/2/buy", fmt.Sprintf(`{"user_id":%q}`, user))
				if code != 201 && code != 202 && code != 409 {
					t.Fatalf("buy: %d %s", code, body)
				}
				return code
			}
			if code := buy(stage + "-winner"); code != 201 && code != 202 {
				t.Fatalf("the one unit: %d", code)
			}
			// The first loser learns the sell-out from the stage (and
			// redis-stream's may find the unit still queued: not for good).
			testkit.Eventually(t, "a loser is answered from memory", 10*time.Second, func() bool {
				if buy(testenv.Name(stage+"-learner")) != 409 {
					t.Fatal("a second unit was sold")
				}
				before := rdb.sent.Load()
				return buy(testenv.Name(stage+"-probe")) == 409 && rdb.sent.Load() == before
			})
			// The one command memory may cost is a reread of the epoch once
			// its lease has run out: at most one per lease that passes.
			rdb.names()
			start := time.Now()
			for i := range 50 {
				if code := buy(fmt.Sprint(stage, "-late-", i)); code != 409 {
					t.Fatalf("late buyer %d: %d, want 409", i, code)
				}
			}
			allowed := 1 + int(time.Since(start)/lease)
			sent := rdb.names()
			for _, name := range sent {
				if name != "get "+admission.EpochKey("product:2") {
					t.Fatalf("late buyers sent %q to Redis; want nothing but a reread of the epoch", sent)
				}
			}
			if len(sent) > allowed {
				t.Fatalf("late buyers reread the epoch %d times in %d leases", len(sent), allowed)
			}
			if code, body := call("POST", "/api/v1/admin/products/2/reset", `{"stock":1}`); code != 200 {
				t.Fatalf("reset: %d %s", code, body)
			}
			if code := buy(stage + "-after-reset"); code != 201 && code != 202 {
				t.Fatalf("right after a reset the item must sell: %d", code)
			}
		})
	}
}

// soloLease is the sold-out lease of soloInstance.
const soloLease = 2 * time.Second

// soloInstance runs one instance in process, on SQLite and rdb, and
// returns a function that sends it a request as the admin, with an
// Idempotency-Key when key is not empty, whose context carries buyerMark.
func soloInstance(t *testing.T, rdb *redis.Client) func(method, path, body, key string) (int, string) {
	t.Helper()
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"SECKILL_ADMIN_TOKEN": fleetToken, "SECKILL_RECONCILE_INTERVAL": "0s",
			"SECKILL_SOLD_OUT_LEASE": soloLease.String(), "SECKILL_REQUEST_TIMEOUT": "30s"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	in, err := newInstance(cfg, backends{db: testenv.SQLite(t), redis: rdb}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.close() })
	return func(method, path, body, key string) (int, string) {
		req := httptest.NewRequestWithContext(context.WithValue(context.Background(), buyerMark{}, true), method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+fleetToken)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		in.handler.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
}

// TestEpochReadOnAClusterCountsItsNodesDials: on a Cluster the connections
// are dialled by the nodes' own clients, made before the epochs were (the
// app pings the Cluster first). A read on a connection the node dialled
// anew (here its connections are killed; a restart of the node does the
// same) must carry a new session, as on one server.
func TestEpochReadOnAClusterCountsItsNodesDials(t *testing.T) {
	skipShort(t)
	nodes := testenv.StartRedisCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	item := testenv.Name("epoch-item")
	if err := rdb.Set(ctx, admission.EpochKey(item), "stored", 0).Err(); err != nil { // the node's client and its connection exist
		t.Fatal(err)
	}
	e := admission.NewRedisEpochs(rdb, rdb, time.Minute) // not subscribed: every Epoch reads
	first, err := e.Epoch(ctx, item)
	if err != nil {
		t.Fatal(err)
	}
	node, err := rdb.MasterForKey(ctx, admission.EpochKey(item))
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: node.Options().Addr})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "a read on a new connection", 10*time.Second, func() bool {
		v, err := e.Epoch(ctx, item)
		if err == nil && v == first {
			t.Fatalf("the read on a connection dialled after the first read carries the first read's session: %q", v)
		}
		return err == nil && strings.HasPrefix(v, "stored/")
	})
}
