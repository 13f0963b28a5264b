package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// adminToken is the SECKILL_ADMIN_TOKEN of every instance the suite starts.
const adminToken = "chaos-admin-token"

// full reports whether the long form runs (make chaos).
func full() bool { return os.Getenv("SECKILL_CHAOS") == "full" }

// pick returns short in the CI form and long under make chaos.
func pick[T any](short, long T) T {
	if full() {
		return long
	}
	return short
}

// rig is one test's world: a fresh MySQL database, its own Redis servers,
// one toxiproxy with a proxy in front of each, and the seckill instances.
type rig struct {
	t        *testing.T
	db       *sql.DB // direct, for the checks; never through a proxy
	dsn      string  // direct DSN
	mysql    *faultProxy
	redis    *testenv.RedisProcess
	redisPx  *faultProxy
	redlock  []*testenv.RedisProcess
	redlockP []*faultProxy
	toxi     *toxiproxy.ApiServer
	insts    []*instance
	client   *http.Client
	mu       sync.Mutex
	figures  []figures
	buyKeys  bool // streamOrder sends each buy with Idempotency-Key: its user
	// onLost, when set, hears the buys streamOrder found without an
	// answer instead of the test failing (the harness's own tests).
	onLost func(streamBuy)
}

type rigOptions struct {
	redlock   int      // number of RedLock Redis servers to start
	redisArgs []string // extra arguments of the app's redis-server
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	if testing.Short() {
		t.Skip("the chaos suite starts seckill processes and Redis servers; skipped with -short")
	}
	dsn := testenv.MySQLDSN(t)
	r := &rig{t: t, dsn: dsn}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close check pool: %v", err)
		}
	})
	r.db = db
	r.toxi = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())

	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	r.mysql = r.proxy("mysql", cfg.Addr)
	r.redis = testenv.StartRedis(t, o.redisArgs...)
	r.redisPx = r.proxy("redis", r.redis.Addr)
	for i := 0; i < o.redlock; i++ {
		p := testenv.StartRedis(t)
		r.redlock = append(r.redlock, p)
		r.redlockP = append(r.redlockP, r.proxy(fmt.Sprintf("redlock-%d", i), p.Addr))
	}

	tr := &http.Transport{
		Proxy:               nil, // loopback only, whatever the environment says
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     5 * time.Second,
	}
	r.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return r
}

// faultProxy is a toxiproxy proxy on a free loopback port.
type faultProxy struct {
	t *testing.T
	p *toxiproxy.Proxy
}

func (r *rig) proxy(name, upstream string) *faultProxy {
	r.t.Helper()
	p := toxiproxy.NewProxy(r.toxi, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		r.t.Fatalf("start proxy %s: %v", name, err)
	}
	// Registered before the instances' cleanups, so it runs after them:
	// the instances shut down while their backends still answer.
	r.t.Cleanup(p.Stop)
	return &faultProxy{t: r.t, p: p}
}

// Addr is where clients connect to reach the upstream through the proxy.
func (f *faultProxy) Addr() string { return f.p.Listen }

// toxic adds a toxic and returns the function that removes it. Removal is
// also registered as a cleanup, so a failed test heals the wire too.
func (f *faultProxy) toxic(name, kind, stream string, toxicity float32, attrs map[string]any) (heal func()) {
	f.t.Helper()
	body, err := json.Marshal(map[string]any{"name": name, "type": kind, "stream": stream, "toxicity": toxicity, "attributes": attrs})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		f.t.Fatalf("add toxic %s to %s: %v", name, f.p.Name, err)
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			// RemoveToxic ignores its context while a latency toxic hands a
			// chunk to a link whose client died (the defect that
			// TestToxiproxyLatencyStrandsAGoroutine pins): bounded here, so
			// that such a test fails saying so instead of hanging until the
			// suite's timeout.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			removed := make(chan error, 1)
			go func() { removed <- f.p.Toxics.RemoveToxic(ctx, name) }()
			select {
			case err := <-removed:
				if err != nil {
					f.t.Errorf("remove toxic %s from %s: %v", name, f.p.Name, err)
				}
			case <-time.After(time.Minute):
				f.t.Errorf("removing toxic %s from %s did not return within a minute: a latency toxic still holds chunks for a client that is gone (see TestToxiproxyLatencyStrandsAGoroutine); remove the toxic before killing its clients", name, f.p.Name)
			}
		})
	}
	f.t.Cleanup(heal)
	return heal
}

// blackhole drops everything in both directions until healed: requests
// vanish and no answer or close ever arrives, as with a dead switch port.
func (f *faultProxy) blackhole() (heal func()) {
	up := f.toxic("blackhole-up", "timeout", "upstream", 1, map[string]any{"timeout": 0})
	down := f.toxic("blackhole-down", "timeout", "downstream", 1, map[string]any{"timeout": 0})
	return func() { up(); down() }
}

// instance is one `seckill serve` process.
type instance struct {
	t    *testing.T
	name string
	url  string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	mu   sync.Mutex
	dead bool
	// spans are when the test had the process paused or killed (to zero
	// while it still is): a buy out then may lose its answer.
	spans []span
}

// span is a stretch of time; an open one has a zero to.
type span struct{ from, to time.Time }

// disturbed reports whether the test paused or killed the process at any
// moment from from to to.
func (in *instance) disturbed(from, to time.Time) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, s := range in.spans {
		if !s.from.After(to) && (s.to.IsZero() || !s.to.Before(from)) {
			return true
		}
	}
	return false
}

// disturb opens a span of a pause or a kill, before the signal.
func (in *instance) disturb() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.spans = append(in.spans, span{from: time.Now()})
}

// baseEnv is what every instance runs with; tests override single values.
func (r *rig) baseEnv() map[string]string {
	cfg, err := mysqldriver.ParseDSN(r.dsn)
	if err != nil {
		r.t.Fatal(err)
	}
	cfg.Addr = r.mysql.Addr()
	env := map[string]string{
		"SECKILL_STAGE":              "redis-lock",
		"SECKILL_MYSQL_DSN":          cfg.FormatDSN(),
		"SECKILL_REDIS_ADDR":         r.redisPx.Addr(),
		"SECKILL_ADMIN_TOKEN":        adminToken,
		"SECKILL_LOCK_TTL":           "2s",
		"SECKILL_LOCK_WAIT":          "2s",
		"SECKILL_FENCING":            "true",
		"SECKILL_RECONCILE_INTERVAL": "500ms",
		"SECKILL_SHUTDOWN_TIMEOUT":   "3s",
		"SECKILL_LOG_LEVEL":          "warn",
	}
	if len(r.redlockP) > 0 {
		addrs := make([]string, len(r.redlockP))
		for i, p := range r.redlockP {
			addrs[i] = p.Addr()
		}
		env["SECKILL_REDLOCK_ADDRS"] = strings.Join(addrs, ",")
	}
	return env
}

// start runs `seckill serve` with baseEnv plus extra and waits until it
// answers /healthz.
func (r *rig) start(name string, extra map[string]string) *instance {
	r.t.Helper()
	bin := testkit.BuildSeckill(r.t)
	port := testkit.FreePorts(r.t, 1)[0]
	env := r.baseEnv()
	for k, v := range extra {
		env[k] = v
	}
	env["SECKILL_ADDR"] = "127.0.0.1:" + strconv.Itoa(port)
	env["SECKILL_INSTANCE"] = name
	list := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	logPath := filepath.Join(r.t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = list
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start %s: %v", name, err)
	}
	in := &instance{t: r.t, name: name, url: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // its status is judged by whoever stopped it
		_ = logFile.Close()
		close(in.done)
	}()
	r.t.Cleanup(func() {
		in.stop()
		if r.t.Failed() {
			r.t.Logf("log of %s:\n%s", name, tail(logPath, 4000))
		}
	})
	r.insts = append(r.insts, in)

	deadline := time.Now().Add(30 * time.Second)
	for {
		if ok := r.healthy(in); ok {
			return in
		}
		select {
		case <-in.done:
			r.t.Fatalf("%s exited at start:\n%s", name, tail(logPath, 4000))
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s did not answer /healthz within 30s:\n%s", name, tail(logPath, 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *rig) healthy(in *instance) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.url+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (in *instance) signal(sig syscall.Signal) {
	in.t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.dead {
		return
	}
	if err := in.cmd.Process.Signal(sig); err != nil {
		in.t.Errorf("signal %v to %s: %v", sig, in.name, err)
	}
}

// pause stops the process (SIGSTOP): it keeps its sockets and its leases
// but runs nothing, like a long GC pause or a frozen VM.
func (in *instance) pause() {
	in.disturb()
	in.signal(syscall.SIGSTOP)
}

// resume continues a paused process.
func (in *instance) resume() {
	in.signal(syscall.SIGCONT)
	in.mu.Lock()
	defer in.mu.Unlock()
	if n := len(in.spans); n > 0 && in.spans[n-1].to.IsZero() && !in.dead {
		in.spans[n-1].to = time.Now()
	}
}

// kill ends the process at once (SIGKILL) and waits for it.
func (in *instance) kill() {
	in.disturb()
	in.signal(syscall.SIGKILL)
	in.mu.Lock()
	in.dead = true
	in.mu.Unlock()
	select {
	case <-in.done:
	case <-time.After(10 * time.Second):
		in.t.Errorf("%s did not exit 10s after SIGKILL", in.name)
	}
}

// stop asks the process to shut down (SIGCONT in case it is paused, then
// SIGTERM) and kills it if it has not exited in 10s.
func (in *instance) stop() {
	in.mu.Lock()
	dead := in.dead
	in.dead = true
	in.mu.Unlock()
	if dead {
		return
	}
	_ = in.cmd.Process.Signal(syscall.SIGCONT) // it may be paused
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(10 * time.Second):
		in.t.Errorf("%s ignored SIGTERM for 10s; killing it", in.name)
		_ = in.cmd.Process.Kill()
		<-in.done
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// reset restocks product 1 through the admin API of in (which also
// reloads the redis-atomic copy) and returns once it answered 200.
func (r *rig) reset(in *instance, stock int) {
	r.t.Helper()
	status, body := r.do(in, http.MethodPost, "/api/v1/admin/products/1/reset", map[string]string{"Authorization": "Bearer " + adminToken}, fmt.Sprintf(`{"stock":%d}`, stock))
	if status != http.StatusOK {
		r.t.Fatalf("reset on %s: %d %s", in.name, status, body)
	}
}

// do sends one request with a 10s bound and returns status and body.
func (r *rig) do(in *instance, method, path string, header map[string]string, body string) (int, []byte) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, in.url+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s on %s: %v", method, path, in.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		r.t.Fatalf("%s %s on %s: read body: %v", method, path, in.name, err)
	}
	return resp.StatusCode, b
}

// orders counts the order rows of product 1 whose user matches the SQL
// LIKE pattern, read in MySQL directly.
func (r *rig) orders(userLike string) int {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE product_id = 1 AND user_id LIKE ?", userLike).Scan(&n); err != nil {
		r.t.Fatalf("count orders: %v", err)
	}
	return n
}

// lockHeld reports whether the Redis lock of product 1 exists right now,
// read on the server itself, not through the proxy.
func lockHeld(ctx context.Context, c *redis.Client) bool {
	n, err := c.Exists(ctx, "lock:{product:1}").Result()
	return err == nil && n == 1
}

// sleepCtx sleeps d unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d): // collected once it fires or is dropped (Go 1.23+)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errNoAnswer = errors.New("no answer")
