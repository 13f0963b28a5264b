package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// RedisProcess is a redis-server the test started on a free loopback port,
// for faults a shared server cannot take: kill it, pause it, restart it.
type RedisProcess struct {
	t    testing.TB
	Addr string
	dir  string
	port int
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server with no persistence on a free port and
// stops it when the test ends. Extra args are passed through.
func StartRedis(t testing.TB, args ...string) *RedisProcess {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server is not installed: %v", err)
	}
	port := testkit.FreePorts(t, 1)[0]
	p := &RedisProcess{t: t, Addr: fmt.Sprintf("127.0.0.1:%d", port), dir: t.TempDir(), port: port}
	p.start(args...)
	t.Cleanup(p.Kill)
	return p
}

func (p *RedisProcess) start(args ...string) {
	p.t.Helper()
	all := append([]string{"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", p.dir}, args...)
	p.cmd = exec.Command("redis-server", all...)
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("redis-server on %s did not answer: %v", p.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL) and waits for it; its data is lost.
func (p *RedisProcess) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill() // it may already be gone
	_ = p.cmd.Wait()         // reports the kill itself
	p.cmd = nil
}

// Restart starts a killed server again, empty, on the same port.
func (p *RedisProcess) Restart(args ...string) {
	p.t.Helper()
	p.Kill()
	p.start(args...)
}

// Client returns a client of this server with short timeouts, closed at
// cleanup.
func (p *RedisProcess) Client() *redis.Client {
	// The options of a RedLock instance: deadlines honoured, no retries of
	// its own, and a dead server reported as dead rather than as slow.
	c := redis.NewClient(lock.InstanceOptions(&redis.Options{
		Addr: p.Addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond,
	}))
	p.t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartRedisCluster starts three redis-server masters in cluster mode on
// free loopback ports, joins them with redis-cli --cluster create, waits for
// cluster_state:ok, and returns their addresses.
func StartRedisCluster(t testing.TB) []string {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		Unavailable(t, "redis-cli is not installed: %v", err)
	}
	var addrs []string
	for i := 0; i < 3; i++ {
		p := StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs = append(addrs, p.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, a := range addrs {
			n := redis.NewClient(&redis.Options{Addr: a})
			info, err := n.ClusterInfo(context.Background()).Result()
			_ = n.Close()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok")
		}
		if ok {
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster never reached cluster_state:ok")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
