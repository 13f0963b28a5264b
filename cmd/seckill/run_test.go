package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// demoRun is a `seckill demo` started by run() on free loopback ports.
type demoRun struct {
	front, instances []string // base URLs
	db               string   // the demo's SQL file
	stdout, stderr   *testkit.SyncBuffer
	cancel           context.CancelFunc
	done             chan error
}

func startDemo(t *testing.T, extra map[string]string) *demoRun {
	t.Helper()
	addrs := testkit.FreeAddrs(t, 4)
	env := map[string]string{
		"SECKILL_DEMO_DB":     filepath.Join(t.TempDir(), "demo.db"),
		"SECKILL_ADMIN_TOKEN": "demo-test-token",
	}
	for k, v := range extra {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &demoRun{stdout: &testkit.SyncBuffer{}, stderr: &testkit.SyncBuffer{}, cancel: cancel, done: make(chan error, 1), db: env["SECKILL_DEMO_DB"]}
	// exited tells WaitHealthy of an early exit; d.done keeps run's error
	// for stop and the cleanup all the same.
	exited := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"demo", "-addr", addrs[0], "-instances", strings.Join(addrs[1:], ",")},
			func(k string) string { return env[k] }, d.stdout, d.stderr)
		d.done <- err
		exited <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			t.Error("demo did not stop")
		}
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	for _, a := range addrs {
		if err := testkit.WaitHealthy(wctx, "http://"+a+"/healthz", exited); err != nil {
			t.Fatal(err)
		}
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
	t.Parallel()
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
		if stage := resp.Header.Get("X-Seckill-Stage"); stage != "redis-lock" {
			t.Fatalf("the default stage is redis-lock, got %q", stage)
		}
	}
	out := d.stdout.String()
	for _, want := range []string{"demo-test-token", strings.TrimPrefix(d.instances[0], "http://"), "press Ctrl-C"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// The admin token is left for the lab, readable by this user only.
	tokenFile := filepath.Join(filepath.Dir(d.db), "admin-token")
	st, err := os.Stat(tokenFile)
	if err != nil {
		t.Fatalf("the demo must write its admin token for the lab: %v", err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Errorf("admin token file mode %v, want 0600", perm)
	}
	if got, _ := os.ReadFile(tokenFile); strings.TrimSpace(string(got)) != "demo-test-token" {
		t.Errorf("admin token file holds %q", got)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("run after cancel: %v\nstderr: %s", err, d.stderr.String())
	}
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a stopped demo must remove its token file: %v", err)
	}
}

func TestRunRejectsBadInvocations(t *testing.T) {
	getenv := func(k string) string {
		if k == "SECKILL_STAGE" {
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
		{[]string{"serve"}, getenv, "SECKILL_STAGE"},
		{[]string{"probe"}, func(string) string { return "" }, "probe takes one URL"},
	}
	for _, c := range cases {
		err := run(context.Background(), c.args, c.env, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run %v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// TestCommandHelp: -h prints the command's own help to stdout and succeeds,
// for every command.
func TestCommandHelp(t *testing.T) {
	for cmd, want := range map[string][]string{
		"serve":     {"usage: seckill serve", "SECKILL_MYSQL_DSN", "SECKILL_ITEM_QUEUE"},
		"migrate":   {"usage: seckill migrate", "SECKILL_MYSQL_DSN"},
		"demo":      {"usage: seckill demo [flags]", "-instances", "-addr", ".demo/"},
		"probe":     {"usage: seckill probe [flags] URL", "-timeout"},
		"catalogue": {"usage: seckill catalogue [flags]", "-items", "SECKILL_DEMO_DB"},
	} {
		for _, flag := range []string{"-h", "--help"} {
			var out, errOut bytes.Buffer
			if err := run(context.Background(), []string{cmd, flag}, func(string) string { return "" }, &out, &errOut); err != nil {
				t.Errorf("%s %s: %v, want success", cmd, flag, err)
			}
			for _, w := range want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("%s %s lacks %q:\n%s", cmd, flag, w, out.String())
				}
			}
			if strings.Contains(out.String(), `(default "")`) {
				t.Errorf("%s %s shows an empty default:\n%s", cmd, flag, out.String())
			}
			if errOut.Len() != 0 {
				t.Errorf("%s %s wrote to stderr: %q", cmd, flag, errOut.String())
			}
		}
	}
}

// TestCommandLineErrorsAreReportedOnce: a wrong flag or a malformed DSN is
// one clear message, in the returned error only (main prints it once).
func TestCommandLineErrorsAreReportedOnce(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{[]string{"serve", "-x"}, nil, []string{"flag provided but not defined: -x", "see 'seckill serve -h'"}},
		{[]string{"demo", "-instance", ":1"}, nil, []string{"-instance", "see 'seckill demo -h'"}},
		{[]string{"serve"}, map[string]string{"SECKILL_MYSQL_DSN": "127.0.0.1:3306"}, []string{"SECKILL_MYSQL_DSN is not a MySQL DSN", "user:password@tcp(127.0.0.1:3306)/seckill"}},
		{[]string{"migrate", "extra"}, map[string]string{"SECKILL_MYSQL_DSN": "root:@tcp(127.0.0.1:1)/x"}, []string{"takes no arguments"}},
		// A stray word used to end the flags: the demo then started on the
		// default ports, ignoring -addr.
		{[]string{"demo", "extra-arg", "-addr", ":9480"}, nil, []string{"demo takes no arguments", `"extra-arg" "-addr" ":9480"`}},
		{[]string{"serve"}, map[string]string{"SECKILL_MYSQL_DSN": "root:@tcp(127.0.0.1:1)/x", "SECKILL_ADDR": "notaport"}, []string{"SECKILL_ADDR"}},
		{[]string{"serve"}, map[string]string{"SECKILL_MYSQL_DSN": "root:@tcp(127.0.0.1:1)/x", "SECKILL_PEERS": "http://a:1,ftp//b"}, []string{"SECKILL_PEERS", "ftp//b"}},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		err := run(context.Background(), c.args, func(k string) string { return c.env[k] }, &out, &errOut)
		if err == nil {
			t.Fatalf("%v: want an error", c.args)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q lacks %q", c.args, err, w)
			}
		}
		if n := strings.Count(err.Error(), "SECKILL_MYSQL_DSN"); n > 1 {
			t.Errorf("%v: the variable is named %d times: %q", c.args, n, err)
		}
		if errOut.Len() != 0 || out.Len() != 0 {
			t.Errorf("%v: also printed %q %q: the message would appear twice", c.args, out.String(), errOut.String())
		}
	}
}

// TestDemoOnATakenPortSaysHowToMove: the error names the flags that move
// the demo to other ports.
func TestDemoOnATakenPortSaysHowToMove(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	free := testkit.FreeAddrs(t, 3)
	env := map[string]string{"SECKILL_DEMO_DB": filepath.Join(t.TempDir(), "demo.db")}
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"demo", "-addr", ln.Addr().String(), "-instances", strings.Join(free, ",")},
		func(k string) string { return env[k] }, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "-instances") {
		t.Fatalf("demo on a taken port: %v", err)
	}
}

// TestDemoListensOnLoopbackUnlessAsked: bare :port addresses bind
// 127.0.0.1, since the demo prints its admin token; -network binds every
// interface and the banner says so.
func TestDemoListensOnLoopbackUnlessAsked(t *testing.T) {
	for _, network := range []bool{false, true} {
		env := map[string]string{"SECKILL_DEMO_DB": filepath.Join(t.TempDir(), "demo.db"), "SECKILL_ADMIN_TOKEN": "demo-test-token"}
		args := []string{"demo", "-addr", ":0", "-instances", ":0,:0"}
		if network {
			args = append(args, "-network")
		}
		ctx, cancel := context.WithCancel(context.Background())
		out := &testkit.SyncBuffer{}
		done := make(chan error, 1)
		go func() { done <- run(ctx, args, func(k string) string { return env[k] }, out, io.Discard) }()
		var banner string
		for banner == "" {
			select {
			case err := <-done:
				cancel()
				t.Fatalf("demo %v returned %v before printing its banner", args, err)
			case <-time.After(20 * time.Millisecond):
				if s := out.String(); strings.Contains(s, "press Ctrl-C") {
					banner = s
				}
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("demo %v: %v", args, err)
		}
		urls := regexp.MustCompile(`http://[^/\s]+`).FindAllString(banner, 3) // front page, instances
		if len(urls) != 3 {
			t.Fatalf("banner of demo %v names %d URLs, want 3:\n%s", args, len(urls), banner)
		}
		for _, u := range urls {
			loopback := strings.HasPrefix(u, "http://127.0.0.1:")
			if loopback == network {
				t.Errorf("demo %v bound %s", args, u)
			}
		}
		if warned := strings.Contains(banner, "NETWORK"); warned != network {
			t.Errorf("demo %v: banner warns of the network: %v, want %v:\n%s", args, warned, network, banner)
		}
	}
}

// TestDemoWithAFairLock: SECKILL_LOCK_FAIR reaches redis-lock on every
// instance, which says so in /api/v1/info (what a lab labels its
// "redis-lock (fair)" row by) and sells through the fair lock.
func TestDemoWithAFairLock(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			d := startDemo(t, map[string]string{"SECKILL_LOCK_FAIR": fmt.Sprint(fair)})
			for i, base := range d.instances {
				resp, err := http.Get(base + "/api/v1/info")
				if err != nil {
					t.Fatal(err)
				}
				var info api.Info
				err = json.NewDecoder(resp.Body).Decode(&info)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if info.LockFair != fair {
					t.Fatalf("%s: lock_fair %v, want %v", base, info.LockFair, fair)
				}
				body := strings.NewReader(fmt.Sprintf(`{"user_id":"fair-%d","quantity":1}`, i))
				resp, err = http.Post(base+"/api/v1/products/1/buy", "application/json", body)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Seckill-Stage") != "redis-lock" {
					t.Fatalf("buy on %s: %s, stage %q", base, resp.Status, resp.Header.Get("X-Seckill-Stage"))
				}
			}
		})
	}
}
