package deploy

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestComposeHARedisPromotableOnlyOnceSynced runs the commands that
// docker-compose.ha.yml gives the app's two Redis servers, here, on a free
// port and a fresh folder, and turns each into a replica of a primary that
// holds its answers (SIGSTOP), as the Sentinels turn a primary restarted
// from its stale append-only file into a replica of the promoted one.
// Until the copy is done the server must be unpromotable
// (replica-priority 0, which the Sentinels never promote), and once its
// link to the primary is up it must get the default priority (100) back.
func TestComposeHARedisPromotableOnlyOnceSynced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and its replicas and pauses the primary; left to the full tier")
	}
	p, err := loadProjectErr(map[string]string{"SECKILL_ADMIN_TOKEN": testToken}, "docker-compose.yml", "docker-compose.ha.yml")
	if err != nil {
		t.Fatalf("docker-compose.yml with docker-compose.ha.yml does not load: %v", err)
	}
	for _, name := range []string{appRedis, "redis-replica"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each has its own servers, ports and folders
			cmd := []string(service(t, p, name).Command)
			primary := testenv.StartRedis(t)
			primary.Pause()
			t.Cleanup(primary.Resume)

			server := startServiceCommand(t, cmd)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			host, port, _ := strings.Cut(primary.Addr, ":")
			if err := server.SlaveOf(ctx, host, port).Err(); err != nil {
				t.Fatalf("REPLICAOF %s: %v", primary.Addr, err)
			}
			replication := func() string { return server.Info(ctx, "replication").Val() }
			testkit.Eventually(t, name+" turning into a replica", time.Minute, func() bool {
				return strings.Contains(replication(), "role:slave")
			})
			if info := replication(); !strings.Contains(info, "master_link_status:down") {
				t.Fatalf("%s copied a primary that answers nothing: %s", name, info)
			}
			if got := priority(ctx, t, server); got != "0" {
				t.Errorf("%s (command %q) has replica-priority %s while it has not copied its primary: the Sentinels could promote it with stale data", name, cmd, got)
			}

			primary.Resume()
			testkit.Eventually(t, name+" copying its primary and getting the default priority back", time.Minute, func() bool {
				return strings.Contains(replication(), "master_link_status:up") && priority(ctx, t, server) == "100"
			})
		})
	}
}

func priority(ctx context.Context, t *testing.T, c *redis.Client) string {
	t.Helper()
	v, err := c.ConfigGet(ctx, "replica-priority").Result()
	if err != nil {
		t.Fatalf("CONFIG GET replica-priority: %v", err)
	}
	return v["replica-priority"]
}

// startServiceCommand runs a compose service's command here, on a free
// port and in a fresh folder, and stops it with SIGTERM, as docker stop does,
// when the test ends. It returns a client once the server answers.
func startServiceCommand(t *testing.T, cmd []string) *redis.Client {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("redis-server is not installed: %v", err)
	}
	if len(cmd) == 0 {
		t.Fatal("the service has no command")
	}
	port := testkit.FreePorts(t, 1)[0]
	dir := t.TempDir()
	args := withSetting(withSetting(cmd[1:], "--dir", dir), "--port", fmt.Sprint(port))
	args = append(args, "--bind", "127.0.0.1")
	c := exec.Command(cmd[0], args...)
	c.Dir = dir
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &testkit.SyncBuffer{}
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		t.Fatalf("start %q: %v", cmd, err)
	}
	exited := make(chan struct{})
	go func() { _ = c.Wait(); close(exited) }()
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() {
		defer client.Close()
		// redis-server refuses a SIGTERM while it writes its first
		// append-only file after a sync ("Writing initial AOF, can't
		// exit"), so the signal waits for that to end.
		testkit.Poll(time.Minute, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			info, err := client.Info(ctx, "persistence").Result()
			return err != nil || (strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0"))
		})
		_ = c.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Errorf("%q did not stop on SIGTERM:\n%s", cmd, out.String())
		}
		// Whatever the script left behind (its polling loop) goes too.
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	})
	testkit.Eventually(t, fmt.Sprintf("%q answering on port %d", cmd[:2], port), time.Minute, func() bool {
		select {
		case <-exited:
			t.Fatalf("%q exited:\n%s", cmd, out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return client.Ping(ctx).Err() == nil
	})
	return client
}

// withSetting returns args with the value of a redis-server setting
// replaced, or added when args lack it: redis-server applies --dir as it
// reads it, so a folder that exists only in the container cannot be
// overridden by a later one.
func withSetting(args []string, name, value string) []string {
	out := append([]string{}, args...)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == name {
			out[i+1] = value
			return out
		}
	}
	return append(out, name, value)
}
