package testenv

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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
	// lead comes before the port on the command line: a sentinel's
	// config file and --sentinel.
	lead []string
	cmd  *exec.Cmd
	// exited is closed once cmd has exited and been waited for.
	exited chan struct{}
}

// StartRedis starts a redis-server with no persistence on a free port and
// stops it when the test ends. Extra args are passed through.
func StartRedis(t testing.TB, args ...string) *RedisProcess {
	t.Helper()
	return startRedis(t, nil, func(int) []string { return args })
}

// startRedis starts a redis-server with the args args returns for its
// port and folder. A server that exits because its port was taken in the
// meantime (FreePorts releases the ports it finds) is started again on
// other ports, with lead and args called again for them; any other exit
// fails the test with its log. lead, when not nil, gives what comes first
// on the command line (a sentinel's config file).
func startRedis(t testing.TB, lead func(port int, dir string) []string, args func(port int) []string) *RedisProcess {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server is not installed: %v", err)
	}
	for attempt := 1; ; attempt++ {
		port := testkit.FreePorts(t, 1)[0]
		p := &RedisProcess{t: t, Addr: fmt.Sprintf("127.0.0.1:%d", port), dir: t.TempDir(), port: port}
		if lead != nil {
			p.lead = lead(port, p.dir)
		}
		err := p.tryStart(args(port)...)
		if err == nil {
			t.Cleanup(p.Kill)
			return p
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("redis-server: %v; trying other ports", err)
	}
}

// errPortTaken is a redis-server that exited because a port it was to
// listen on was in use.
var errPortTaken = errors.New("port in use")

func (p *RedisProcess) start(args ...string) {
	p.t.Helper()
	if err := p.tryStart(args...); err != nil {
		p.t.Fatal(err)
	}
}

// tryStart starts the server and waits until it answers PING. It fails
// when the server exits first (errPortTaken when a port was in use) or
// does not answer within 30 seconds.
func (p *RedisProcess) tryStart(args ...string) error {
	all := append(append(append([]string{}, p.lead...), "--port", strconv.Itoa(p.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", p.dir), args...)
	cmd := exec.Command("redis-server", all...)
	out := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	// The calls' deadlines bound their reads: on a port taken by a
	// listener that answers nothing, each waited for go-redis's read
	// timeout (3 s) before the start looked at the exited server. A second
	// is long enough for a starved machine's answer.
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			// The answer may come from another test binary's server that
			// took the port between FreePorts and this start: ours then
			// exits, and this one must not be taken for it.
			switch pid, perr := serverPID(c); {
			case perr != nil:
				err = perr
			case pid != cmd.Process.Pid:
				_ = cmd.Process.Kill()
				<-exited
				return fmt.Errorf("redis-server on %s: %w by process %d:\n%s", p.Addr, errPortTaken, pid, out)
			default:
				p.cmd, p.exited = cmd, exited
				return nil
			}
		}
		select {
		case <-exited:
			if strings.Contains(out.String(), "Address already in use") {
				return fmt.Errorf("redis-server on %s: %w:\n%s", p.Addr, errPortTaken, out)
			}
			return fmt.Errorf("redis-server on %s exited:\n%s", p.Addr, out)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on %s did not answer within 30s: %v\n%s", p.Addr, err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serverPID is the process id the server behind c reports (INFO server).
func serverPID(c *redis.Client) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO server has no process_id:\n%s", info)
}

// Kill stops the server at once (SIGKILL) and waits for it; its data is lost.
func (p *RedisProcess) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill() // it may already be gone
	<-p.exited               // the waiting goroutine reaps it
	p.cmd = nil
}

// Pause stops the server (SIGSTOP): its connections stay open and nothing
// is answered, as with a server stuck in a long command or a stalled VM.
// A server already killed is left alone.
func (p *RedisProcess) Pause() { p.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (p *RedisProcess) Resume() { p.signal(syscall.SIGCONT) }

func (p *RedisProcess) signal(sig syscall.Signal) {
	p.t.Helper()
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal redis-server on %s: %v", p.Addr, err)
	}
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
	var addrs []string
	for _, p := range StartRedisClusterWithReplicas(t, 0) {
		addrs = append(addrs, p.Addr)
	}
	return addrs
}

// StartRedisClusterWithReplicas starts a Cluster of three masters with
// replicas replicas each (redis-cli --cluster create --cluster-replicas),
// waits for cluster_state:ok and for every replica to be in sync, and
// returns the processes, masters first (as redis-cli assigns them; check
// with ROLE before relying on it), so that a test can kill one.
func StartRedisClusterWithReplicas(t testing.TB, replicas int) []*RedisProcess {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		Unavailable(t, "redis-cli is not installed: %v", err)
	}
	var procs []*RedisProcess
	var addrs []string
	for i := 0; i < 3*(1+replicas); i++ {
		// The cluster bus port is chosen too: by default it is the port
		// plus 10,000, which may be in the kernel's ephemeral range.
		p := startRedis(t, nil, func(int) []string {
			bus := testkit.FreePorts(t, 1)[0]
			return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(bus)}
		})
		procs, addrs = append(procs, p), append(addrs, p.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, a := range addrs {
			n := redis.NewClient(&redis.Options{Addr: a})
			info, err := n.ClusterInfo(context.Background()).Result()
			repl, rerr := n.Info(context.Background(), "replication").Result()
			_ = n.Close()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok") &&
				rerr == nil && (strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up"))
		}
		if ok {
			return procs
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster never reached cluster_state:ok with every replica in sync")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
