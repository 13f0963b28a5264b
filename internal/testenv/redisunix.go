package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// StartRedisUnix starts a redis-server with no persistence that listens
// on a Unix socket only (--port 0), stops it when the test ends, and
// returns the socket's path. Extra args are passed through (a --port
// among them opens TCP as well). The folder is a short one of its own:
// a socket's path must fit in 107 bytes, which a test's TempDir may not.
func StartRedisUnix(t testing.TB, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server is not installed: %v", err)
	}
	dir, err := os.MkdirTemp("", "rsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "redis.sock")
	all := append([]string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", dir}, args...)
	cmd := exec.Command("redis-server", all...)
	out := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, ContextTimeoutEnabled: true})
	defer c.Close()
	testkit.Eventually(t, "redis-server answers on "+sock, 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("redis-server on %s exited:\n%s", sock, out)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	})
	return sock
}
