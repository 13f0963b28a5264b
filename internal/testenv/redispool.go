package testenv

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// WarmPool leaves n connections idle in rdb's pool: n calls held at once
// each take their own.
func WarmPool(t testing.TB, rdb *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = rdb.Conn()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if idle := rdb.PoolStats().IdleConns; int(idle) != n {
		t.Fatalf("%d idle connections after warming, want %d", idle, n)
	}
}

// NamedClientOnConnect is an OnConnect that names each connection of a
// client name (CLIENT SETNAME), for KillClientsNamed.
func NamedClientOnConnect(name string) func(ctx context.Context, cn *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error { return cn.ClientSetName(ctx, name).Err() }
}

// KillClientsNamed closes, on the server admin is a client of, every
// connection named name (CLIENT KILL ID: a shared server's other clients
// are left alone), waits until the server lists none of them, and
// returns how many it closed.
func KillClientsNamed(t testing.TB, admin *redis.Client, name string) int {
	t.Helper()
	ctx := context.Background()
	ids := namedClients(t, admin, name)
	for _, id := range ids {
		if err := admin.ClientKillByFilter(ctx, "ID", id).Err(); err != nil {
			t.Fatalf("CLIENT KILL ID %s: %v", id, err)
		}
	}
	testkit.Eventually(t, "the server closed the connections named "+name, 30*time.Second, func() bool {
		return len(namedClients(t, admin, name)) == 0
	})
	return len(ids)
}

// namedClients are the ids of the connections CLIENT LIST names name.
func namedClients(t testing.TB, admin *redis.Client, name string) []string {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		var id string
		named := false
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch {
			case k == "id":
				id = v
			case k == "name" && v == name:
				named = true
			}
		}
		if named && id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// WarmPipelines leaves one connection idle in rdb's pool for pipelines
// (go-redis keeps one apart from the pool of single commands).
func WarmPipelines(t testing.TB, rdb *redis.Client) {
	t.Helper()
	if _, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error { return p.Ping(context.Background()).Err() }); err != nil {
		t.Fatal(err)
	}
	if ps := rdb.PoolStats().PipelineStats; ps == nil || ps.IdleConns != 1 {
		t.Fatalf("pipeline pool %+v after a pipeline, want one idle connection", ps)
	}
}

// CheckedDialer dials as go-redis's own dialer does (its pool then peeks
// at each connection before use) and keeps every connection it made, so
// that a test can wait for a server's close to reach them (ClosedByPeer).
type CheckedDialer struct {
	mu    sync.Mutex
	conns []net.Conn
}

// Dial is a redis.Options.Dialer.
func (d *CheckedDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, err
}

// Conns are the connections Dial made.
func (d *CheckedDialer) Conns() []net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]net.Conn(nil), d.conns...)
}
