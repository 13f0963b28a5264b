package pitfalls_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestFailoverLosesLockAndGrantsItTwice: Redis replicates asynchronously, so
// a lock the primary granted can be lost when the primary dies before the
// replica copied it. After the replica is promoted, a second client obtains
// the same lock: two holders. Even our correct single-Redis lock cannot
// prevent this; RedLock (a majority of independent servers) and the fencing
// token at the write are the answers.
//
// To make the lost write certain rather than likely, the replica reaches the
// primary through a proxy the test controls: once the replica is in sync,
// the proxy holds back everything the primary sends, the lock is taken, and
// the primary is killed with the lock still in the proxy's hands.
func TestFailoverLosesLockAndGrantsItTwice(t *testing.T) {
	ctx := ctxT(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server is not on PATH (apt-get install redis-server): the failover test starts two of its own")
	}
	dir := t.TempDir()
	primary := startRedis(t, bin, dir+"/primary")
	replica := startRedis(t, bin, dir+"/replica")
	link := newGatedProxy(t, primary.addr)

	if err := replica.rdb.Do(ctx, "REPLICAOF", "127.0.0.1", link.port()).Err(); err != nil {
		t.Fatal(err)
	}
	// In sync: a marker written to the primary shows up on the replica.
	if err := primary.rdb.Set(ctx, "marker", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The wait follows the sync (its offsets and bytes), not the clock: a
	// machine whose cores are all taken slows it down without failing it.
	testkit.WaitProgress(t, "the replica to sync", 30*time.Second, func() string { return testenv.ReplicationState(replica.addr) },
		func() bool { return replica.rdb.Get(ctx, "marker").Val() == "1" })
	t.Logf("1. replica %s follows primary %s (through a proxy) and is in sync", replica.addr, primary.addr)

	// From now on the replica hears nothing more from the primary.
	link.hold()
	t.Log("2. the proxy holds back everything the primary sends: replication lags")

	ca := testenv.NewLock(t, primary.rdb, lock.Options{})
	t.Cleanup(func() { _ = ca.Close() }) // its server is gone by then; nothing to report
	a, err := ca.Obtain(ctx, "product:1", 30*time.Second, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatalf("A's obtain on the primary: %v", err)
	}
	t.Logf("3. A obtains product:1 on the primary (token %d); the write is acknowledged but not yet copied", a.Token())
	primary.kill(t)
	link.close()
	t.Log("4. the primary is killed (SIGKILL) with the lock still held back in the proxy")

	// Failover: promote the replica, as Sentinel or an operator would.
	if err := replica.rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Log("5. the replica is promoted (REPLICAOF NO ONE); it never saw A's lock")
	cb := testenv.NewLock(t, replica.rdb, lock.Options{})
	t.Cleanup(func() { _ = cb.Close() })
	b, err := cb.Obtain(ctx, "product:1", 30*time.Second, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatalf("B's obtain on the promoted replica = %v; want the lock, which the failover lost", err)
	}
	if a.Err() != nil {
		t.Fatalf("A's lease = %v; want A still convinced it holds the lock", a.Err())
	}
	t.Logf("6. B obtains product:1 on the new primary: two holders, A (token %d, its lease still valid) and B (token %d)", a.Token(), b.Token())

	// What still protects the data: B's fencing token is larger than A's
	// (tokens follow the server clock, not only the lost counter), so a
	// store that checks tokens refuses A's late writes.
	if b.Token() <= a.Token() {
		t.Errorf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
	t.Log("7. B's fencing token is above A's: a store that checks tokens refuses A's late writes")
	if err := b.Release(ctx); err != nil {
		t.Errorf("B's release: %v", err)
	}
}

type redisProc struct {
	addr string
	cmd  *exec.Cmd
	rdb  *redis.Client
	once sync.Once
}

// startRedis runs a throwaway redis-server on a free loopback port.
func startRedis(t *testing.T, bin, dir string) *redisProc {
	t.Helper()
	port := testkit.FreePorts(t, 1)[0]
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--logfile", "")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server (%s): %v", dir, err)
	}
	p := &redisProc{addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd}
	p.rdb = redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1})
	t.Cleanup(func() {
		_ = p.rdb.Close()
		p.kill(t)
	})
	testkit.Eventually(t, "redis-server on "+p.addr, 10*time.Second, func() bool { return p.rdb.Ping(context.Background()).Err() == nil })
	return p
}

func (p *redisProc) kill(t *testing.T) {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill() // SIGKILL: no chance to flush anything
		_ = p.cmd.Wait()         // reports the kill; nothing to check
	})
}

// gatedProxy forwards TCP to target. After hold, whatever target sends is
// kept back instead of forwarded: the replication link is cut in a way the
// test controls to the byte.
type gatedProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	held   bool
	conns  []net.Conn
}

func newGatedProxy(t *testing.T, target string) *gatedProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gatedProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *gatedProxy) port() string { return strconv.Itoa(p.ln.Addr().(*net.TCPAddr).Port) }

func (p *gatedProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = true
}

func (p *gatedProxy) isHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *gatedProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *gatedProxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, down) }() // replica -> primary is never held
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := up.Read(buf)
				if n > 0 && !p.isHeld() {
					if _, werr := down.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return // the primary died or the proxy closed
				}
			}
		}()
	}
}
