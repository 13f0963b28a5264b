package testenv

import (
	"errors"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestRedisOnATakenPortIsReportedAsSuch: a redis-server whose port was
// taken after FreePorts found it exits; the start says the port was taken
// (so StartRedis tries other ports) rather than waiting for an answer.
func TestRedisOnATakenPortIsReportedAsSuch(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server is not installed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	p := &RedisProcess{t: t, Addr: l.Addr().String(), dir: t.TempDir(), port: port}
	if err := p.tryStart(); !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a taken port: %v, want errPortTaken", err)
	}
	// StartRedis itself gets a server that answers.
	c := redis.NewClient(&redis.Options{Addr: StartRedis(t).Addr})
	defer c.Close()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRedisOnAPortAnotherServerTookIsNotTakenForOurs: when another test
// binary's redis-server took the port between FreePorts and this start,
// its PING answer must not pass for our server's (ours exits, and a test
// would pause, kill or share a server that is not its own).
func TestRedisOnAPortAnotherServerTookIsNotTakenForOurs(t *testing.T) {
	other := StartRedis(t)
	p := &RedisProcess{t: t, Addr: other.Addr, dir: t.TempDir(), port: other.port}
	if err := p.tryStart(); !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a port another redis-server serves: %v, want errPortTaken", err)
	}
	if p.cmd != nil {
		t.Fatal("the start kept a process that is not serving the port")
	}
	// The other server is untouched.
	pid, err := serverPID(other.Client())
	if err != nil || pid != other.cmd.Process.Pid {
		t.Fatalf("the other server: process %d (%v), want %d", pid, err, other.cmd.Process.Pid)
	}
}

// TestRedisPauseStopsAnswersUntilResume: a paused server keeps its
// connections and answers nothing; resumed, it answers again.
func TestRedisPauseStopsAnswersUntilResume(t *testing.T) {
	p := StartRedis(t)
	c := p.Client()
	p.Pause()
	t.Cleanup(p.Resume) // before the kill, should the test end here
	if err := c.Ping(t.Context()).Err(); err == nil {
		t.Fatal("a paused server answered PING")
	}
	p.Resume()
	testkit.Eventually(t, "the resumed server to answer PING", 10*time.Second, func() bool {
		return c.Ping(t.Context()).Err() == nil
	})
}
