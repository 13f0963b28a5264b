package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// The smoke test's burst: smokeBuyers buyers, each a different user, are
// released at once against a stock of smokeStock, through nginx.
const (
	smokeBuyers = 400
	smokeStock  = 100
	// smokeKillAfter is how many buyers have their final answer when one
	// replica is killed: early enough that most of the burst is still to
	// come.
	smokeKillAfter = 40
	// smokeHAPace spaces the HA test's buyers, so that its 400 arrivals
	// take 4 s, longer than the Sentinels take to promote the replica
	// (about 2 s to agree the primary is down, then the election): at
	// once, redis-stream answers them all before the kill lands.
	smokeHAPace = 10 * time.Millisecond
)

// TestComposeSmoke runs docker-compose.yml for real: it builds the image
// once, starts the fleet under a private project name on free loopback
// ports, releases 400 buyers at once through nginx on a stock of 100, kills
// (SIGKILL) one replica mid-burst, and checks that nginx kept answering,
// that every buyer ended with a definite answer, and that the audit and
// MySQL's own rows agree with what the buyers were told: sold = stock,
// nothing oversold, stock conserved, one order row per successful buyer and
// none for anyone else. Then `down -v`.
//
// It needs a Docker engine with the compose v2 plugin and runs only when
// asked (make compose-smoke, or SECKILL_COMPOSE_SMOKE=1), never in make test.
func TestComposeSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole fleet in Docker; skipped with -short")
	}
	if os.Getenv("SECKILL_COMPOSE_SMOKE") != "1" {
		t.Skip("set SECKILL_COMPOSE_SMOKE=1 (or run make compose-smoke) to start the fleet in Docker")
	}
	fl := upFleet(t, "docker-compose.yml")

	// The story, as a user runs it: one burst per stage through nginx.
	story, err := fl.compose(t.Context(), "run", "--rm", "story")
	if err != nil {
		t.Fatalf("docker compose run --rm story: %v\n%s", err, story)
	}
	safe := 0
	for _, st := range inventory.Stages {
		if !inventory.Oversells(st, len(replicas)) {
			safe++
		}
	}
	if !bytes.Contains(story, fmt.Appendf(nil, "every safe stage (%d) sold exactly its stock", safe)) {
		t.Errorf("the story did not end with every safe stage exact:\n%s", story)
	}
	t.Logf("docker compose run --rm story:\n%s", lastLines(story, 12))

	// A known stock, on the product every buyer wants.
	resetBody := fmt.Sprintf(`{"stock":%d}`, smokeStock)
	if status, body := fl.call(t, http.MethodPost, "/api/v1/admin/products/1/reset", resetBody, map[string]string{"Authorization": "Bearer " + fl.token}); status != http.StatusOK {
		t.Fatalf("reset through nginx: %d %s", status, body)
	}

	res := fl.burst(t, "app-2", 0, nil)
	t.Logf("burst: %d final answers (%d ok, %d sold out, %d already purchased after an unknown answer, %d sold out after an unknown answer); %d attempts; statuses %v; answered by %v; %d answers after the kill, by %v",
		len(res.final), res.count(outcomeOK), res.count(outcomeSoldOut), res.count(outcomeBoughtBefore), res.count(outcomeUnknown), res.attempts, res.statuses, res.byInstance, res.afterKill, res.byInstanceAfterKill)

	// nginx kept answering: every request got an HTTP answer from it, the
	// ones in flight at the killed replica included (nginx's 502), and it
	// went on selling through the other two after the kill.
	if len(res.transportErrs) > 0 {
		t.Errorf("%d requests got no HTTP answer from nginx, e.g. %v", len(res.transportErrs), res.transportErrs[0])
	}
	if res.pendingAtKill == 0 {
		t.Errorf("the replica was killed after every buyer had its answer: not mid-burst")
	}
	if res.afterKill == 0 {
		t.Error("no answer came back after the kill")
	}
	for _, name := range []string{"app-1", "app-3"} {
		if res.byInstanceAfterKill[name] == 0 {
			t.Errorf("%s answered nothing after app-2 was killed (answers after the kill by replica: %v)", name, res.byInstanceAfterKill)
		}
	}
	for _, b := range res.unexpected {
		t.Errorf("unexpected answer: %s", b)
	}

	// Every buyer has a definite answer, and the successes are exactly the
	// stock.
	if len(res.final) != smokeBuyers {
		t.Fatalf("%d of %d buyers got a final answer", len(res.final), smokeBuyers)
	}
	bought := res.users(outcomeOK, outcomeBoughtBefore)
	if len(bought) != smokeStock {
		t.Errorf("%d buyers were told they bought, want the stock %d", len(bought), smokeStock)
	}

	// The audit, as the API reports it.
	var a api.Audit
	if status, body := fl.call(t, http.MethodGet, "/api/v1/products/1/audit", "", nil); status != http.StatusOK || json.Unmarshal(body, &a) != nil {
		t.Fatalf("audit through nginx: %d %s", status, body)
	}
	t.Logf("audit: %+v", a)
	if a.InitialStock != smokeStock || a.Sold != smokeStock || a.Stock != 0 || a.Oversold != 0 || !a.Conserved || a.Orders != smokeStock {
		t.Errorf("audit %+v, want initial %d, sold %d, stock 0, %d orders, oversold 0, conserved", a, smokeStock, smokeStock, smokeStock)
	}

	// MySQL itself: one row per buyer told it bought, none for anyone else;
	// a buyer whose answer was lost in the kill learnt its fate from the
	// retry.
	rows := fl.orderUsers(t)
	slices.Sort(rows)
	slices.Sort(bought)
	if !slices.Equal(rows, bought) {
		lost, phantom := difference(bought, rows), difference(rows, bought)
		t.Errorf("MySQL has %d order rows for product 1, the buyers were told %d: told but no row %v; row but not told %v (buyers told sold out after a lost answer: %v)",
			len(rows), len(bought), lost, phantom, res.users(outcomeUnknown))
	}
	stock, initial := fl.productRow(t)
	if initial != smokeStock || stock != initial-len(rows) {
		t.Errorf("MySQL products row: initial_stock %d, stock %d, with %d order rows: not conserved", initial, stock, len(rows))
	}

	// nginx's own answers are problem+json too: a body over its limit,
	// and, once every replica is stopped, a bad gateway.
	fl.wantProxyProblem(t, http.MethodPost, "/api/v1/products/1/buy", strings.Repeat("x", 2<<20), map[int]string{http.StatusRequestEntityTooLarge: "body-too-large"})
	if out, err := fl.compose(t.Context(), "stop", "--timeout", "5", "app-1", "app-2", "app-3"); err != nil {
		t.Fatalf("docker compose stop app-1 app-2 app-3: %v\n%s", err, out)
	}
	// Connecting to a stopped replica's address is refused (502) or, when
	// its address is already gone from the network, times out (504):
	// either way nginx's own problem.
	fl.wantProxyProblem(t, http.MethodGet, "/api/v1/products/1", "", map[int]string{http.StatusBadGateway: "bad-gateway", http.StatusGatewayTimeout: "gateway-timeout"})
}

// TestComposeSmokeHA runs docker-compose.yml with docker-compose.ha.yml:
// the app's Redis with a replica and three Sentinels, and redis-stream at
// that setup's durability, replica (a 202 once a replica has the order).
// It sends 400 buyers through nginx on a stock of 100, one every
// smokeHAPace so that the sale outlasts the failover, SIGKILLs the Redis
// primary after the first 40 answers (and starts it again once the
// Sentinels promoted the replica, as an orchestrator would), and checks
// that the Sentinels promoted the replica, that the fleet answered after the kill, that every
// buyer ended with a definite answer, and that MySQL's own rows (once the
// queue drained) agree with what the buyers were told: sold = stock,
// nothing oversold, one order row per buyer told it bought, 202s included.
// Like TestComposeSmoke it runs only when asked (make compose-smoke).
func TestComposeSmokeHA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole fleet in Docker; skipped with -short")
	}
	if os.Getenv("SECKILL_COMPOSE_SMOKE") != "1" {
		t.Skip("set SECKILL_COMPOSE_SMOKE=1 (or run make compose-smoke) to start the fleet in Docker")
	}
	fl := upFleet(t, "docker-compose.yml", "docker-compose.ha.yml")
	if got := fl.appEnv(t, "SECKILL_STREAM_DURABILITY"); got != "replica" {
		t.Fatalf("the HA setup runs redis-stream at durability %q, want replica", got)
	}
	admin := map[string]string{"Authorization": "Bearer " + fl.token}
	if status, body := fl.call(t, http.MethodPut, "/api/v1/admin/fleet/stage", `{"stage":"redis-stream"}`, admin); status != http.StatusOK {
		t.Fatalf("stage switch through nginx: %d %s", status, body)
	}
	if status, body := fl.call(t, http.MethodPost, "/api/v1/admin/products/1/reset", fmt.Sprintf(`{"stock":%d}`, smokeStock), admin); status != http.StatusOK {
		t.Fatalf("reset through nginx: %d %s", status, body)
	}
	before := fl.masterOf(t)
	// The orchestrator's part, as in the Cluster smoke: once the Sentinels
	// have promoted the replica, the killed primary is started again and
	// rejoins as its replica. At durability replica every Idempotency-Key
	// claim waits for a replica, so until then a keyed buyer is told 503
	// unavailable, nothing run, and retries (before claims waited, the
	// burst ended on orders a replica had not confirmed).
	rejoin := func(ctx context.Context) {
		testkit.Eventually(t, "the Sentinels to promote the replica", 2*time.Minute, func() bool {
			return fl.masterOf(t) != before
		})
		if out, err := fl.compose(ctx, "start", "redis"); err != nil {
			t.Errorf("docker compose start redis: %v\n%s", err, out)
		}
	}
	res := fl.burst(t, "redis", smokeHAPace, rejoin)
	t.Logf("burst: %d final answers (%d ok, %d sold out, %d already purchased after an unknown answer, %d sold out after an unknown answer); %d attempts; statuses %v; %d answers after the kill",
		len(res.final), res.count(outcomeOK), res.count(outcomeSoldOut), res.count(outcomeBoughtBefore), res.count(outcomeUnknown), res.attempts, res.statuses, res.afterKill)
	after := fl.masterOf(t)
	t.Logf("the Sentinels' primary: %s before the kill, %s after", before, after)
	if before == after {
		t.Errorf("the Sentinels still name %s, the killed primary", before)
	}
	if res.afterKill == 0 {
		t.Error("no answer came back after the kill")
	}
	fl.checkFailoverBurst(t, res, "primary")
}

// appEnv reads a variable of app-1's environment.
func (fl *fleet) appEnv(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := fl.compose(ctx, "config", "--format", "json")
	if err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, out)
	}
	var cfg struct {
		Services map[string]struct {
			Environment map[string]*string `json:"environment"`
		} `json:"services"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("docker compose config: %v", err)
	}
	if v := cfg.Services["app-1"].Environment[name]; v != nil {
		return *v
	}
	return ""
}

// masterOf asks sentinel-1 for the primary it names for the master
// "seckill".
func (fl *fleet) masterOf(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := fl.compose(ctx, "exec", "-T", "sentinel-1", "redis-cli", "-p", "26379", "sentinel", "get-master-addr-by-name", "seckill")
	if err != nil {
		t.Fatalf("sentinel get-master-addr-by-name: %v\n%s", err, out)
	}
	return strings.Join(strings.Fields(string(out)), ":")
}

// wantProxyProblem sends one request through nginx and wants nginx's own
// answer: one of the statuses of want, as application/problem+json of
// that status's type (want[status]) and with Retry-After.
func (fl *fleet) wantProxyProblem(t *testing.T, method, path, body string, want map[int]string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, fl.nginx+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := fl.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var p api.Problem
	slug, ok := want[resp.StatusCode]
	if !ok || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("Retry-After") == "" ||
		json.Unmarshal(raw, &p) != nil || p.Type != api.ProblemTypePrefix+slug || p.Status != resp.StatusCode {
		t.Errorf("%s %s through nginx: %d %v %s; want one of %v as application/problem+json of that type with Retry-After", method, path, resp.StatusCode, resp.Header, raw, want)
	}
}

// fleet is a compose project started by upFleet.
type fleet struct {
	dir     string   // the repo root, where docker-compose.yml is
	files   []string // the compose files, in the repo root
	project string
	env     []string
	envFile string // replaces .env, so that a user's settings stay out
	token   string
	nginx   string // base URL
	client  *http.Client
}

// upFleet builds the image once and starts the fleet of the compose files
// with --wait. Its cleanup tears everything down, volumes and the image
// tag included.
func upFleet(t *testing.T, files ...string) *fleet {
	t.Helper()
	for _, check := range [][]string{{"version"}, {"compose", "version"}} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		out, err := exec.CommandContext(ctx, "docker", check...).CombinedOutput()
		cancel()
		if err != nil {
			t.Skipf("no Docker engine with the compose v2 plugin answers (docker %s: %v)\n%s", strings.Join(check, " "), err, out)
		}
	}
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	id := randomHex(t, 4)
	fl := &fleet{dir: dir, files: files, project: "seckill-smoke-" + id}
	// The smoke test's own values, whatever the shell or a .env file says:
	// an empty env file replaces .env, and these replace the shell's.
	envFile := filepath.Join(t.TempDir(), "smoke.env")
	if err := os.WriteFile(envFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// No admin token: the fleet makes its own, as it does for a user.
	fl.env = append(os.Environ(),
		"SECKILL_ADMIN_TOKEN=",
		"SECKILL_IMAGE=seckill-smoke:"+id,
		"SECKILL_PUBLISH_IP=127.0.0.1",
		"SECKILL_STAGE=redis-lock",
		"SECKILL_CRITICAL_SECTION_DELAY=5ms",
		"SECKILL_LOG_LEVEL=info",
	)
	fl.envFile = envFile
	base := len(fl.env)
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        smokeBuyers,
		MaxIdleConnsPerHost: smokeBuyers,
	}
	fl.client = &http.Client{Transport: tr, Timeout: 60 * time.Second}

	t.Cleanup(func() {
		tr.CloseIdleConnections()
		if t.Failed() {
			out, _ := fl.compose(context.Background(), "ps", "-a")
			t.Logf("docker compose ps -a:\n%s", out)
			out, _ = fl.compose(context.Background(), "logs", "--no-color", "--tail", "60")
			t.Logf("docker compose logs (tail):\n%s", out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := fl.compose(ctx, "down", "-v", "--remove-orphans", "--timeout", "10"); err != nil {
			t.Errorf("docker compose down -v: %v\n%s", err, out)
		}
		if out, err := exec.CommandContext(ctx, "docker", "image", "rm", "seckill-smoke:"+id).CombinedOutput(); err != nil {
			t.Errorf("docker image rm seckill-smoke:%s: %v\n%s", id, err, out)
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	// One build: app-1 is the only service with a build section.
	start := time.Now()
	if out, err := fl.compose(ctx, "build"); err != nil {
		t.Fatalf("docker compose build: %v\n%s", err, out)
	}
	t.Logf("image built in %v", time.Since(start).Round(time.Second))
	start = time.Now()
	// Ports are picked just before `up`, and picked again when one was
	// taken in between: this machine runs other tests that listen too.
	for try := 1; ; try++ {
		// FreePorts picks below the kernel's ephemeral range, where the
		// other tests' :0 listeners and outgoing connections land, so the
		// ports are still free when Docker binds them.
		ports := testkit.FreePorts(t, 4)
		fl.env = fl.env[:base]
		for i, v := range []string{"SECKILL_NGINX_PORT", "SECKILL_APP1_PORT", "SECKILL_APP2_PORT", "SECKILL_APP3_PORT"} {
			fl.env = append(fl.env, v+"="+strconv.Itoa(ports[i]))
		}
		fl.nginx = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
		out, err := fl.compose(ctx, "up", "-d", "--wait", "--wait-timeout", "600", "--no-build")
		if err == nil {
			break
		}
		if try < 3 && bytes.Contains(out, []byte("address already in use")) {
			t.Logf("a port was taken meanwhile; again with other ports:\n%s", lastLines(out, 3))
			if out, err := fl.compose(ctx, "down", "--timeout", "5"); err != nil {
				t.Fatalf("docker compose down: %v\n%s", err, out)
			}
			continue
		}
		t.Fatalf("docker compose up -d --wait: %v\n%s", err, out)
	}
	t.Logf("fleet healthy in %v (project %s, nginx on %s)", time.Since(start).Round(time.Second), fl.project, fl.nginx)
	// The token service printed the token it made; a user reads it the
	// same way.
	out, err := fl.compose(ctx, "logs", "--no-color", "--no-log-prefix", "token")
	if err != nil {
		t.Fatalf("docker compose logs token: %v\n%s", err, out)
	}
	if m := regexp.MustCompile(`admin token: (\S+) \(new, in `).FindSubmatch(out); m != nil {
		fl.token = string(m[1])
	} else {
		t.Fatalf("the token service did not print a new token:\n%s", out)
	}
	return fl
}

// compose runs `docker compose` on this fleet's project and returns its
// combined output.
func (fl *fleet) compose(ctx context.Context, args ...string) ([]byte, error) {
	all := []string{"compose", "--env-file", fl.envFile}
	for _, f := range fl.files {
		all = append(all, "-f", f)
	}
	all = append(append(all, "-p", fl.project), args...)
	cmd := exec.CommandContext(ctx, "docker", all...)
	cmd.Dir = fl.dir
	cmd.Env = fl.env
	return cmd.CombinedOutput()
}

// call sends one request through nginx and returns status and body.
func (fl *fleet) call(t *testing.T, method, path, body string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, fl.nginx+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := fl.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// outcome is a buyer's final answer.
type outcome string

const (
	outcomeOK      outcome = "ok"       // 201, or redis-stream's 202
	outcomeSoldOut outcome = "sold-out" // 409 sold-out
	// outcomeBoughtBefore is a 409 already-purchased after an earlier
	// attempt whose answer was lost (nginx's 502 for the killed replica, a
	// 503 timeout): that attempt did buy.
	outcomeBoughtBefore outcome = "bought-before"
	// outcomeUnknown is a 409 sold-out after an earlier attempt whose
	// answer was lost. It is right only if the lost attempt did not buy:
	// after a replica was killed between its commit and its answer, the
	// retry (same Idempotency-Key) must be answered with that order. The
	// check of MySQL's rows against what buyers were told catches a wrong
	// one.
	outcomeUnknown outcome = "unknown"
)

// burstResult is what the buyers saw.
type burstResult struct {
	mu                  sync.Mutex
	final               map[string]outcome // user -> final answer
	attempts            int
	statuses            map[int]int
	byInstance          map[string]int
	byInstanceAfterKill map[string]int
	afterKill           int
	pendingAtKill       int
	transportErrs       []error
	unexpected          []string
}

func (r *burstResult) count(o outcome) int {
	n := 0
	for _, v := range r.final {
		if v == o {
			n++
		}
	}
	return n
}

func (r *burstResult) users(os ...outcome) []string {
	var out []string
	for u, v := range r.final {
		if slices.Contains(os, v) {
			out = append(out, u)
		}
	}
	return out
}

// burst releases the buyers, every one at once (pace 0) or one every
// pace, and SIGKILLs the service victim once smokeKillAfter buyers have
// their final answer. A buyer retries, as a real client would,
// whenever its answer says nothing was decided (429, 503, nginx's 502/504),
// with the same Idempotency-Key (its user id): a retry of a buy that did
// happen gets that buy's order (or 409 already-purchased), so every buyer
// ends knowing whether it bought. afterKill, when set, runs right after
// the kill while the buyers go on (an orchestrator's restart).
func (fl *fleet) burst(t *testing.T, victim string, pace time.Duration, afterKill func(context.Context)) *burstResult {
	t.Helper()
	res := &burstResult{final: map[string]outcome{}, statuses: map[int]int{}, byInstance: map[string]int{}, byInstanceAfterKill: map[string]int{}}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	var finished atomic.Int64
	var killed atomic.Bool
	killNow := make(chan struct{})
	var killOnce sync.Once
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < smokeBuyers; i++ {
		wg.Add(1)
		go func(user string, wait time.Duration) {
			defer wg.Done()
			<-release
			if wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
			}
			o := fl.buyUntilDecided(ctx, res, user, &killed)
			res.mu.Lock()
			if o != "" {
				res.final[user] = o
			}
			res.mu.Unlock()
			if finished.Add(1) == smokeKillAfter {
				killOnce.Do(func() { close(killNow) })
			}
		}(fmt.Sprintf("smoke-%03d", i), time.Duration(i)*pace)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	close(release)

	select {
	case <-killNow:
	case <-done:
		t.Error("the burst ended before the kill")
		return res
	}
	res.mu.Lock()
	res.pendingAtKill = smokeBuyers - len(res.final)
	res.mu.Unlock()
	killCtx, killCancel := context.WithTimeout(ctx, time.Minute)
	out, err := fl.compose(killCtx, "kill", "-s", "SIGKILL", victim)
	killCancel()
	killed.Store(true)
	if err != nil {
		t.Errorf("docker compose kill %s: %v\n%s", victim, err, out)
	}
	t.Logf("killed %s with %d of %d buyers still waiting for their answer", victim, res.pendingAtKill, smokeBuyers)
	if afterKill != nil {
		afterKill(ctx) // while the buyers go on
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("the burst did not end: %v", ctx.Err())
	}
	return res
}

// buyUntilDecided buys for user until an answer decides the matter, and
// returns that answer ("" if ctx ended first or the answer broke the API).
func (fl *fleet) buyUntilDecided(ctx context.Context, res *burstResult, user string, killed *atomic.Bool) outcome {
	body := fmt.Sprintf(`{"user_id":%q,"quantity":1}`, user)
	lostAnswer := false
	for ctx.Err() == nil {
		status, instance, problem, err := fl.buyOnce(ctx, user, body)
		after := killed.Load()
		res.mu.Lock()
		res.attempts++
		if err != nil {
			res.transportErrs = append(res.transportErrs, err)
		} else {
			res.statuses[status]++
			res.byInstance[instance]++
			if after {
				res.afterKill++
				res.byInstanceAfterKill[instance]++
			}
		}
		res.mu.Unlock()
		switch {
		case err != nil:
			lostAnswer = true
		case status == http.StatusCreated, status == http.StatusAccepted: // 202: redis-stream's
			return outcomeOK
		case status == http.StatusConflict && problem == "sold-out" && lostAnswer:
			return outcomeUnknown
		case status == http.StatusConflict && problem == "sold-out":
			return outcomeSoldOut
		case status == http.StatusConflict && problem == "already-purchased" && lostAnswer:
			return outcomeBoughtBefore
		case status == http.StatusConflict && problem == "idempotency-in-flight":
			// The attempt that was in flight at the killed replica still
			// holds the key until its lease runs out; then the retry
			// takes it over and is told what that attempt did.
		case status == http.StatusTooManyRequests,
			status == http.StatusServiceUnavailable && problem != "timeout" && problem != "outcome-unknown":
			// Refused with nothing written: try again.
		case status == http.StatusBadGateway, status == http.StatusGatewayTimeout,
			status == http.StatusServiceUnavailable && (problem == "timeout" || problem == "outcome-unknown"):
			// The outcome is unknown: the retry tells (already-purchased).
			lostAnswer = true
		default:
			res.mu.Lock()
			res.unexpected = append(res.unexpected, fmt.Sprintf("%s: %d %s (instance %q, earlier answer lost: %v)", user, status, problem, instance, lostAnswer))
			res.mu.Unlock()
			return ""
		}
		select {
		case <-ctx.Done():
		case <-time.After(50*time.Millisecond + time.Duration(len(user)%7)*10*time.Millisecond):
		}
	}
	return ""
}

// buyOnce sends one buy through nginx, with key as its Idempotency-Key. It returns the status, the replica
// that answered (X-Seckill-Instance, empty for nginx's own answers), and
// the problem slug of a problem+json answer.
func (fl *fleet) buyOnce(ctx context.Context, key, body string) (status int, instance, problem string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fl.nginx+"/api/v1/products/1/buy", strings.NewReader(body))
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := fl.client.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, "", "", fmt.Errorf("read body: %w", err)
	}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/problem+json") {
		var p api.Problem
		if json.Unmarshal(raw, &p) == nil {
			problem = strings.TrimPrefix(p.Type, api.ProblemTypePrefix)
		}
	}
	return resp.StatusCode, resp.Header.Get("X-Seckill-Instance"), problem, nil
}

// mysql runs a query in the mysql service with the client of its image and
// returns the rows, tab-separated.
func (fl *fleet) mysql(t *testing.T, query string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := fl.compose(ctx, "exec", "-T", "mysql", "mysql", "-useckill", "-pseckill", "-N", "-B", "-e", query, "seckill")
	if err != nil {
		t.Fatalf("mysql %q: %v\n%s", query, err, out)
	}
	var rows []string
	for _, line := range strings.Split(string(out), "\n") {
		// The client warns about a password on the command line on stderr.
		if line = strings.TrimSpace(line); line != "" && !strings.Contains(line, "Warning") {
			rows = append(rows, line)
		}
	}
	return rows
}

// orderUsers returns the user of every order row of product 1.
func (fl *fleet) orderUsers(t *testing.T) []string {
	t.Helper()
	return fl.mysql(t, "SELECT user_id FROM orders WHERE product_id = 1")
}

// productRow returns product 1's stock and initial stock as stored.
func (fl *fleet) productRow(t *testing.T) (stock, initial int) {
	t.Helper()
	rows := fl.mysql(t, "SELECT stock, initial_stock FROM products WHERE id = 1")
	if len(rows) != 1 {
		t.Fatalf("products row 1: %q", rows)
	}
	f := strings.Fields(rows[0])
	if len(f) != 2 {
		t.Fatalf("products row 1: %q", rows[0])
	}
	var err1, err2 error
	stock, err1 = strconv.Atoi(f[0])
	initial, err2 = strconv.Atoi(f[1])
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("products row 1 %q: %v", rows[0], err)
	}
	return stock, initial
}

// difference returns the elements of a missing from b.
func difference(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// lastLines returns the last n lines of out.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestComposeSmokeCluster runs docker-compose.yml with
// docker-compose.cluster.yml: the app on a six-node Redis Cluster (three
// masters, a replica each) under redis-sharded, its stock split over four
// buckets, one of which (b3) hashes to redis-node-1's slots. 400 buyers arrive 10 ms apart through nginx; once 40 have their
// answer, the master redis-node-1 is SIGKILLed. Its replica must take its
// slots over (redis-node-1 is then started again, and rejoins as its
// replica), every buyer must end with a definite answer (those whose
// bucket was on the dead master hear 503 and retry with their key), and
// MySQL must hold exactly one order per buyer told "bought": the stock,
// conserved.
func TestComposeSmokeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole fleet in Docker; skipped with -short")
	}
	if os.Getenv("SECKILL_COMPOSE_SMOKE") != "1" {
		t.Skip("set SECKILL_COMPOSE_SMOKE=1 (or run make compose-smoke) to start the fleet in Docker")
	}
	fl := upFleet(t, "docker-compose.yml", "docker-compose.cluster.yml")
	if got := fl.appEnv(t, "SECKILL_STOCK_BUCKETS"); got != "4" {
		t.Fatalf("the Cluster setup splits the stock into %q buckets, want 4", got)
	}
	// The smoke test's environment names redis-lock for every setup; this
	// one sells through the buckets.
	admin := map[string]string{"Authorization": "Bearer " + fl.token}
	if status, body := fl.call(t, http.MethodPut, "/api/v1/admin/fleet/stage", `{"stage":"redis-sharded"}`, admin); status != http.StatusOK {
		t.Fatalf("stage switch through nginx: %d %s", status, body)
	}
	if status, body := fl.call(t, http.MethodPost, "/api/v1/admin/products/1/reset", fmt.Sprintf(`{"stock":%d}`, smokeStock), admin); status != http.StatusOK {
		t.Fatalf("reset through nginx: %d %s", status, body)
	}
	id, slots := fl.clusterNode(t, "redis-node-2", "redis-node-1")
	if slots == "" {
		t.Fatalf("redis-node-1 (%s) holds no slots before the kill: not a master", id)
	}
	// The kill must take a bucket of the product with it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	out, err := fl.compose(ctx, "exec", "-T", "redis-node-2", "redis-cli", "cluster", "keyslot", "seckill:{product:1:b3}:stock")
	cancel()
	if err != nil {
		t.Fatalf("cluster keyslot: %v\n%s", err, out)
	}
	if owner := fl.slotOwner(t, "redis-node-2", strings.TrimSpace(string(out))); owner != id {
		t.Fatalf("bucket b3 of product 1 (slot %s) is on %s, not on redis-node-1 (%s): the kill would miss the product's buckets", strings.TrimSpace(string(out)), owner, id)
	}
	// The orchestrator's part: once the replica has taken the slots over,
	// the killed node is started again and rejoins as its replica. Until
	// then the new master has no replica to confirm a key record on
	// (SECKILL_IDEMPOTENCY_REPLICAS=1), so a buyer whose record lives on
	// its slots is told 503 unavailable, nothing written, and retries.
	rejoin := func(ctx context.Context) {
		testkit.Eventually(t, "the slots of the killed redis-node-1 to be served by another node", 2*time.Minute, func() bool {
			owner := fl.slotOwner(t, "redis-node-2", strings.Fields(slots)[0])
			return owner != "" && owner != id
		})
		if out, err := fl.compose(ctx, "start", "redis-node-1"); err != nil {
			t.Errorf("docker compose start redis-node-1: %v\n%s", err, out)
		}
	}
	res := fl.burst(t, "redis-node-1", smokeHAPace, rejoin)
	t.Logf("burst: %d final answers (%d ok, %d sold out, %d already purchased after an unknown answer, %d sold out after an unknown answer); %d attempts; statuses %v; %d answers after the kill",
		len(res.final), res.count(outcomeOK), res.count(outcomeSoldOut), res.count(outcomeBoughtBefore), res.count(outcomeUnknown), res.attempts, res.statuses, res.afterKill)
	if _, after := fl.clusterNode(t, "redis-node-2", "redis-node-1"); after != "" {
		t.Errorf("redis-node-1 still holds slots %s after the kill: its replica did not take over", after)
	}
	if owner := fl.slotOwner(t, "redis-node-2", strings.Fields(slots)[0]); owner == "" || owner == id {
		t.Errorf("the slots %s of the killed master are served by %q after the burst", slots, owner)
	}
	fl.checkFailoverBurst(t, res, "master")
}

// clusterNodes is CLUSTER NODES as the service from sees it.
func (fl *fleet) clusterNodes(t *testing.T, from string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := fl.compose(ctx, "exec", "-T", from, "redis-cli", "cluster", "nodes")
	if err != nil {
		t.Fatalf("cluster nodes on %s: %v\n%s", from, err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// clusterNode returns the id of the node that announces host, and the
// slot ranges it serves as a master that has not failed ("" otherwise),
// as the service from sees them.
func (fl *fleet) clusterNode(t *testing.T, from, host string) (id, slots string) {
	t.Helper()
	for _, line := range fl.clusterNodes(t, from) {
		f := strings.Fields(line)
		// <id> <ip:port@cport,hostname> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
		if len(f) < 8 || !strings.HasSuffix(f[1], ","+host) {
			continue
		}
		if strings.Contains(f[2], "master") && !strings.Contains(f[2], "fail") && len(f) > 8 {
			slots = strings.Join(f[8:], " ")
		}
		return f[0], slots
	}
	t.Fatalf("no node announces %s in the view of %s", host, from)
	return "", ""
}

// slotOwner returns the id of the healthy master that serves the first
// slot of span (a slot or a range a-b), as the service from sees it.
func (fl *fleet) slotOwner(t *testing.T, from, span string) string {
	t.Helper()
	first, _, _ := strings.Cut(span, "-")
	want, err := strconv.Atoi(first)
	if err != nil {
		t.Fatalf("slot span %q", span)
	}
	for _, line := range fl.clusterNodes(t, from) {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, isRange := strings.Cut(r, "-")
			a, errA := strconv.Atoi(lo)
			b := a
			if isRange {
				b, err = strconv.Atoi(hi)
			}
			if errA == nil && err == nil && a <= want && want <= b {
				return f[0]
			}
		}
	}
	return ""
}

// checkFailoverBurst checks a burst that killed the Redis server victim
// (its role, for the messages): nginx answered every request, the kill
// landed mid-burst, every buyer ended with a definite answer, exactly the
// stock was sold, and once the writers drained any queue, MySQL's rows
// are exactly the buyers told they bought, conserved.
func (fl *fleet) checkFailoverBurst(t *testing.T, res *burstResult, victim string) {
	t.Helper()
	if len(res.transportErrs) > 0 {
		t.Errorf("%d requests got no HTTP answer from nginx, e.g. %v", len(res.transportErrs), res.transportErrs[0])
	}
	if res.pendingAtKill == 0 {
		t.Errorf("the %s was killed after every buyer had its answer: not mid-burst", victim)
	}
	for _, b := range res.unexpected {
		t.Errorf("unexpected answer: %s", b)
	}
	if len(res.final) != smokeBuyers {
		t.Fatalf("%d of %d buyers got a final answer", len(res.final), smokeBuyers)
	}
	bought := res.users(outcomeOK, outcomeBoughtBefore)
	if len(bought) != smokeStock {
		t.Errorf("%d buyers were told they bought, want the stock %d", len(bought), smokeStock)
	}
	// The writers drain the queue into MySQL.
	var rows []string
	for end := time.Now().Add(2 * time.Minute); ; {
		if rows = fl.orderUsers(t); len(rows) >= len(bought) || time.Now().After(end) {
			break
		}
		time.Sleep(time.Second)
	}
	slices.Sort(rows)
	slices.Sort(bought)
	if !slices.Equal(rows, bought) {
		t.Errorf("MySQL has %d order rows for product 1, the buyers were told %d: told but no row %v; row but not told %v",
			len(rows), len(bought), difference(bought, rows), difference(rows, bought))
	}
	stock, initial := fl.productRow(t)
	if initial != smokeStock || stock != initial-len(rows) {
		t.Errorf("MySQL products row: initial_stock %d, stock %d, with %d order rows: not conserved", initial, stock, len(rows))
	}
}
