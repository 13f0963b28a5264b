package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// freeAddrs reserves n loopback ports and frees them for the caller.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		defer ln.Close()
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of run.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitHealthy polls url until it answers 200 or the deadline passes.
func waitHealthy(t *testing.T, url string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("run returned before %s was healthy: %v", url, err)
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never became healthy", url)
}

// demoRun is a `seckill demo` started by run() on free loopback ports.
type demoRun struct {
	front, instances []string // base URLs
	stdout, stderr   *syncBuffer
	cancel           context.CancelFunc
	done             chan error
}

func startDemo(t *testing.T, extra map[string]string) *demoRun {
	t.Helper()
	addrs := freeAddrs(t, 4)
	env := map[string]string{
		"SECKILL_DEMO_DB":     filepath.Join(t.TempDir(), "demo.db"),
		"SECKILL_ADMIN_TOKEN": "demo-test-token",
	}
	for k, v := range extra {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &demoRun{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		d.done <- run(ctx, []string{"demo", "-addr", addrs[0], "-instances", strings.Join(addrs[1:], ",")},
			func(k string) string { return env[k] }, d.stdout, d.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			t.Error("demo did not stop")
		}
	})
	for _, a := range addrs {
		waitHealthy(t, "http://"+a+"/healthz", d.done)
	}
	d.front = []string{"http://" + addrs[0]}
	for _, a := range addrs[1:] {
		d.instances = append(d.instances, "http://"+a)
	}
	return d
}

// stop cancels run's context and returns its error.
func (d *demoRun) stop(t *testing.T) error {
	t.Helper()
	d.cancel()
	select {
	case err := <-d.done:
		d.done <- err // for the cleanup
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
		return nil
	}
}

func TestDemoRunsAndShutsDown(t *testing.T) {
	d := startDemo(t, nil)
	for i, base := range d.instances {
		body := strings.NewReader(fmt.Sprintf(`{"user_id":"user-%d","quantity":1}`, i))
		resp, err := http.Post(base+"/api/v1/products/1/buy", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Seckill-Instance") != fmt.Sprintf("demo-%d", i+1) {
			t.Fatalf("buy on %s: %s instance %q", base, resp.Status, resp.Header.Get("X-Seckill-Instance"))
		}
		if mode := resp.Header.Get("X-Seckill-Mode"); mode != "redis-lock" {
			t.Fatalf("the default stage is redis-lock, got %q", mode)
		}
	}
	out := d.stdout.String()
	for _, want := range []string{"demo-test-token", strings.TrimPrefix(d.instances[0], "http://"), "press Ctrl-C"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("run after cancel: %v\nstderr: %s", err, d.stderr.String())
	}
}

func TestRunRejectsBadInvocations(t *testing.T) {
	getenv := func(k string) string {
		if k == "SECKILL_MODE" {
			return "sideways"
		}
		return ""
	}
	var out, errOut bytes.Buffer
	cases := []struct {
		args []string
		env  func(string) string
		want string
	}{
		{nil, func(string) string { return "" }, "no command"},
		{[]string{"fly"}, func(string) string { return "" }, "unknown command"},
		{[]string{"serve"}, func(string) string { return "" }, "SECKILL_MYSQL_DSN is required"},
		{[]string{"serve"}, getenv, "SECKILL_MODE"},
		{[]string{"probe"}, func(string) string { return "" }, "probe takes one URL"},
	}
	for _, c := range cases {
		err := run(context.Background(), c.args, c.env, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run %v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
