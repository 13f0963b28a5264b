package testenv_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/embedded"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// Where testenv finds its services is decided once per test binary, from
// the environment, so most tests here run this binary again as a child
// with the environment under test: TestHelper does one thing in the child
// (TESTENV_HELPER names it) and prints what it found.

// deadDocker is a DOCKER_HOST where no engine answers: a machine without
// Docker, even where the default socket exists.
const deadDocker = "DOCKER_HOST=unix:///nonexistent/docker.sock"

func TestHelper(t *testing.T) {
	mode := os.Getenv("TESTENV_HELPER")
	if mode == "" {
		t.Skip("runs only as the child of the tests below")
	}
	switch mode {
	case "redis-twice":
		// Each test gets a server that answers; without Docker each gets
		// its own, gone once the test is over.
		var first string
		t.Run("first", func(t *testing.T) {
			first = testenv.RedisAddr(t)
			ping(t, first)
		})
		t.Run("second", func(t *testing.T) {
			addr := testenv.RedisAddr(t)
			ping(t, addr)
			fmt.Printf("ADDRS %s %s\n", first, addr)
			if conn, err := net.DialTimeout("tcp", first, time.Second); err == nil {
				_ = conn.Close()
				fmt.Println("FIRST-STILL-ANSWERS")
			}
		})
	case "mysql":
		dsn := testenv.MySQLDSN(t)
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(t.Context(), "CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
			t.Fatalf("create a table in the fresh database: %v", err)
		}
		fmt.Println("MYSQL-OK")
	case "redis-then-hang":
		addr := testenv.RedisAddr(t)
		ping(t, addr)
		fmt.Printf("ADDR %s\n", addr)
		time.Sleep(10 * time.Minute) // until the parent kills this process
	default:
		t.Fatalf("unknown TESTENV_HELPER %q", mode)
	}
}

func ping(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING %s: %v", addr, err)
	}
}

// child prepares this test binary to run TestHelper in mode, with none of
// the parent's SECKILL_TEST_*, CI or DOCKER_HOST settings, plus env.
func child(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelper$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SECKILL_TEST_") || k == "CI" || k == "DOCKER_HOST" || k == "TESTENV_HELPER" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(append(cmd.Env, "TESTENV_HELPER="+mode), env...)
	return cmd
}

// runChild runs the child to its end and returns its output and error.
func runChild(t *testing.T, mode string, env ...string) (string, error) {
	t.Helper()
	out, err := child(t, mode, env...).CombinedOutput()
	return string(out), err
}

func TestEnvVarsWin(t *testing.T) {
	r, err := embedded.StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	t.Setenv("SECKILL_TEST_REDIS_ADDR", r.Addr())
	if got := testenv.RedisAddr(t); got != r.Addr() {
		t.Errorf("RedisAddr = %s, want SECKILL_TEST_REDIS_ADDR=%s", got, r.Addr())
	}
}

func TestWithoutDockerRedisIsEmbedded(t *testing.T) {
	out, err := runChild(t, "redis-twice", deadDocker)
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	var first, second string
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "ADDRS "); ok {
			_, _ = fmt.Sscan(rest, &first, &second)
		}
	}
	if first == "" || first == second {
		t.Errorf("want a Redis of its own for each test, got %q and %q:\n%s", first, second, out)
	}
	if strings.Contains(out, "FIRST-STILL-ANSWERS") {
		t.Errorf("the first test's embedded Redis still answers after that test ended:\n%s", out)
	}
	if strings.Contains(out, "--- SKIP") {
		t.Errorf("a Redis test skipped without Docker:\n%s", out)
	}
}

func TestWithoutDockerMySQLSkipsSayingWhy(t *testing.T) {
	out, err := runChild(t, "mysql", deadDocker)
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	for _, want := range []string{"--- SKIP: TestHelper", "SECKILL_TEST_MYSQL_DSN is not set", "no Docker engine at /nonexistent/docker.sock"} {
		if !strings.Contains(out, want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
}

func TestUnderCIMissingServicesFail(t *testing.T) {
	for _, mode := range []string{"mysql", "redis-twice"} {
		out, err := runChild(t, mode, deadDocker, "CI=true")
		if err == nil || !strings.Contains(out, "required service missing under CI=true") || strings.Contains(out, "--- SKIP: TestHelper") {
			t.Errorf("%s under CI=true without services: want a failure naming CI=true, got err %v:\n%s", mode, err, out)
		}
	}
}

// needDocker skips unless a Docker engine and its CLI answer here.
func needDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts containers; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "version").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers (docker version: %v)\n%s", err, out)
	}
}

// testenvContainers lists the containers testenv started that publish port.
func testenvContainers(t *testing.T, port string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label="+testenv.ContainerLabel, "--filter", "publish="+port).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}

func TestContainersWhenDockerAnswers(t *testing.T) {
	needDocker(t)
	// Without SECKILL_TEST_MYSQL_DSN a container is the only MySQL there is.
	out, err := runChild(t, "mysql")
	if err != nil || !strings.Contains(out, "MYSQL-OK") {
		t.Fatalf("MySQL from a container: err %v:\n%s", err, out)
	}
}

// TestContainersRemovedWhenTheBinaryIsKilled kills (SIGKILL) a test binary
// that has a Redis container, where no cleanup of its own can run, and
// waits for the container to be removed all the same.
func TestContainersRemovedWhenTheBinaryIsKilled(t *testing.T) {
	needDocker(t)
	cmd := child(t, "redis-then-hang")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil { // the child has its own copy
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // already dead when the test got that far
		_ = cmd.Wait()         // reports the kill
		_ = r.Close()
	})
	lines := make(chan string, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads any more
			}
		}
	}()
	var addr string
	var seen []string
	for addr == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the child ended without a Redis:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, line)
			if a, found := strings.CutPrefix(line, "ADDR "); found {
				addr = a
			}
		case <-time.After(5 * time.Minute):
			t.Fatalf("no Redis from the child within 5 minutes:\n%s", strings.Join(seen, "\n"))
		}
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if ids := testenvContainers(t, port); len(ids) != 1 {
		t.Fatalf("want the child's one container publishing %s, found %v", port, ids)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(testenvContainers(t, port)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the container of the killed test binary (port %s) is still there after 2 minutes", port)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
