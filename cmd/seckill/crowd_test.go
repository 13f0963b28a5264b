package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// A flash sale is a crowd: the tests here release hundreds of buyers in the
// same instant at three instances, with the settings a user runs, and check
// that every safe stage sells exactly its stock, oversells nothing, answers
// no 500 and drops no connection, and that overload is a 503 that says when
// to come back.

var safeStages = []string{"redis-lock", "redlock", "db-atomic", "redis-atomic", "redis-stream", "redis-sharded"}

// crowdResult counts a crowd's answers: codes and problems each buyer's
// last one (see crowd), the other counts every answer.
type crowdResult struct {
	codes        map[int]int
	problems     map[string]int // problem type of every last answer that is a 4xx/5xx
	transport    int            // requests that got no HTTP answer at all
	noRetryAfter int            // 429 and 503 answers without Retry-After
	told         int            // answers that told a buyer to come back (comesBack)
}

// crowd fires n buyers at urls (round-robin), at most inflight at once, all
// released by one barrier, and counts the answers. A buyer told that
// nothing was done and to come back (429 lock-timeout, 503 overloaded)
// comes back after its Retry-After, as a shopper's app does, until it gets
// another answer or has tried for comeBackFor; codes and problems count
// each buyer's last answer. A crowd on a starved machine (make stress
// beside other suites, -race) sold 29 of redlock's 50 before every buyer
// had had its one try: what these tests check is that the crowd is served
// correctly, not how fast, which the lab measures.
func crowd(t *testing.T, urls []string, token, stage, path string, n, inflight int, body func(i int) string) crowdResult {
	t.Helper()
	return crowdRun(t, urls, token, stage, path, n, inflight, body, nil, comeBackFor)
}

// comeBackFor bounds how long a crowd's buyer keeps coming back: a sale
// that stalls still ends the test, with the buyers' last answers.
const comeBackFor = 2 * time.Minute

// crowdWatched is a crowd whose buyers each try once, with heard called on
// each answer as it comes.
func crowdWatched(t *testing.T, urls []string, token, stage, path string, n, inflight int, body func(i int) string, heard func(status int, problem string)) crowdResult {
	t.Helper()
	return crowdRun(t, urls, token, stage, path, n, inflight, body, heard, 0)
}

// comesBack reports whether an answer tells its buyer that nothing was
// done and to try again.
func comesBack(status int, problem string) bool {
	return (status == 429 && problem == "/problems/lock-timeout") || (status == 503 && problem == "/problems/overloaded")
}

func crowdRun(t *testing.T, urls []string, token, stage, path string, n, inflight int, body func(i int) string, heard func(status int, problem string), retryFor time.Duration) crowdResult {
	t.Helper()
	client := &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: inflight, MaxConnsPerHost: 0},
	}
	defer client.CloseIdleConnections()
	res := crowdResult{codes: map[int]int{}, problems: map[string]int{}}
	var mu sync.Mutex
	slots := make(chan struct{}, inflight)
	// buy sends one buy, holding a slot while it does, and returns its
	// status, problem type and Retry-After; ok is false when no answer
	// came. Every 429 and 503 without Retry-After counts, the ones a buyer
	// came back after too.
	buy := func(i int) (status int, problem string, retryAfter time.Duration, ok bool) {
		slots <- struct{}{}
		defer func() { <-slots }()
		req, err := http.NewRequest("POST", urls[i%len(urls)]+path, strings.NewReader(body(i)))
		if err != nil {
			t.Error(err)
			return 0, "", 0, false
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Seckill-Stage", stage)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			mu.Lock()
			res.transport++
			mu.Unlock()
			t.Logf("%s buyer %d: %v", stage, i, err)
			return 0, "", 0, false
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p api.Problem
		_ = json.Unmarshal(raw, &p)
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			retryAfter = time.Duration(secs) * time.Second
		}
		mu.Lock()
		defer mu.Unlock()
		if heard != nil {
			heard(resp.StatusCode, p.Type)
		}
		if (resp.StatusCode == 429 || resp.StatusCode == 503) && resp.Header.Get("Retry-After") == "" {
			res.noRetryAfter++
		}
		if comesBack(resp.StatusCode, p.Type) {
			res.told++
		}
		return resp.StatusCode, p.Type, retryAfter, true
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			until := time.Now().Add(retryFor)
			for {
				status, problem, retryAfter, ok := buy(i)
				if ok && comesBack(status, problem) && retryAfter > 0 && time.Now().Add(retryAfter).Before(until) {
					time.Sleep(retryAfter)
					continue
				}
				if ok {
					mu.Lock()
					res.codes[status]++
					if status >= 400 {
						res.problems[problem]++
					}
					mu.Unlock()
				}
				return
			}
		}()
	}
	close(start)
	wg.Wait()
	return res
}

// fleetAPI is what a crowd test needs from three running instances.
type fleetAPI struct {
	urls  []string
	token string
	reset func(t *testing.T, stock int)
	audit func(t *testing.T) api.Audit
	logs  func() string // the servers' log, shown when they answered 5xx
}

// checkCrowds runs, for every stage, a crowd of single buyers all in flight
// at once on a small stock, and a longer crowd that keeps inflight buyers
// waiting on a larger one.
func checkCrowds(t *testing.T, f fleetAPI, crowds []struct{ buyers, inflight, stock int }) {
	for _, stage := range append(append([]string{}, safeStages...), "unlocked", "local-mutex") {
		for _, c := range crowds {
			t.Run(fmt.Sprintf("%s/%d-buyers-%d-in-flight", stage, c.buyers, c.inflight), func(t *testing.T) {
				f.reset(t, c.stock)
				res := crowd(t, f.urls, f.token, stage, "/api/v1/products/1/buy", c.buyers, c.inflight, func(i int) string {
					return fmt.Sprintf(`{"user_id":"%s-%d","quantity":1}`, stage, i)
				})
				a := f.audit(t)
				// redis-stream answers 202 and writes the orders behind a
				// queue: judge once it has drained.
				for deadline := time.Now().Add(time.Minute); a.PendingOrders > 0 && time.Now().Before(deadline); a = f.audit(t) {
					time.Sleep(50 * time.Millisecond)
				}
				t.Logf("%s: last answers %v problems %v, %d times told to come back, transport errors %d, audit %+v", stage, res.codes, res.problems, res.told, res.transport, a)
				if res.transport != 0 {
					t.Errorf("%d buyers got no answer at all", res.transport)
				}
				for code, n := range res.codes {
					if code >= 500 && code != 503 {
						t.Errorf("%d answers with status %d: a crowd must never cause a server error", n, code)
						if f.logs != nil {
							t.Logf("server log:\n%s", f.logs())
						}
					}
				}
				if res.noRetryAfter != 0 {
					t.Errorf("%d answers of 429/503 lacked Retry-After", res.noRetryAfter)
				}
				if res.codes[201]+res.codes[202] != a.Orders || a.PendingOrders != 0 || a.Failed != 0 {
					t.Errorf("every 201 or 202 must have exactly one confirmed order: %d + %d vs %d (%d pending, %d failed)", res.codes[201], res.codes[202], a.Orders, a.PendingOrders, a.Failed)
				}
				if stage == "unlocked" || stage == "local-mutex" {
					if a.Oversold == 0 {
						t.Errorf("%s across three instances must still oversell: %+v", stage, a)
					}
					return
				}
				if a.Sold != c.stock || a.Oversold != 0 || !a.Conserved {
					t.Errorf("%s must sell exactly its stock of %d and conserve it: %+v", stage, c.stock, a)
				}
			})
		}
	}
}

// TestFlashCrowdServe: three instances on MariaDB and Redis with serve's
// defaults for the queue per item and the pool size.
func TestFlashCrowdServe(t *testing.T) {
	skipShort(t)
	// As in the demo's test, the lock stages get time to serve their queue
	// on a busy machine; the lab measures the defaults.
	f := newFleet(t, map[string]string{
		"SECKILL_LOCK_WAIT":       "20s",
		"SECKILL_REQUEST_TIMEOUT": "30s",
		// A short window between read and write, so that the teaching
		// stages show their race in a crowd as they do in the demo.
		"SECKILL_CRITICAL_SECTION_DELAY": "2ms",
	})
	checkCrowds(t, fleetAPI{
		urls:  f.urls,
		token: fleetToken,
		reset: func(t *testing.T, stock int) { f.t = t; f.reset("products", 1, stock) },
		audit: func(t *testing.T) api.Audit { f.t = t; return f.audit("products", 1) },
	}, []struct{ buyers, inflight, stock int }{{400, 400, 50}})
}

// TestFlashCrowdDemo: the same crowds at `seckill demo`, its embedded
// Redis and SQLite, with its defaults.
func TestFlashCrowdDemo(t *testing.T) {
	skipShort(t)
	// Under -race on a busy machine the embedded SQLite runs many times
	// slower than in `make run`, so the lock stages get the time they need
	// to serve their queue: what this test checks is that a crowd is served
	// correctly, not how fast (the lab measures that, with the defaults).
	d := startDemo(t, map[string]string{"SECKILL_LOCK_WAIT": "20s", "SECKILL_REQUEST_TIMEOUT": "30s"})
	token := "demo-test-token"
	client := &http.Client{Timeout: 30 * time.Second}
	admin := func(t *testing.T, method, url, body string) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
		}
		return b
	}
	checkCrowds(t, fleetAPI{
		urls:  d.instances,
		token: token,
		logs:  d.stderr.String,
		reset: func(t *testing.T, stock int) {
			admin(t, "POST", d.instances[0]+"/api/v1/admin/products/1/reset", fmt.Sprintf(`{"stock":%d}`, stock))
		},
		audit: func(t *testing.T) api.Audit {
			var a api.Audit
			if err := json.Unmarshal(admin(t, "GET", d.instances[1]+"/api/v1/products/1/audit", ""), &a); err != nil {
				t.Fatal(err)
			}
			return a
		},
	}, []struct{ buyers, inflight, stock int }{{400, 400, 50}})
}

// TestResetReachesEveryInstance: after a sell-out that every instance has
// seen (and remembers), a reset through one instance makes the item
// buyable through the others as soon as the reset has answered.
func TestResetReachesEveryInstance(t *testing.T) {
	skipShort(t)
	f := newFleet(t, nil)
	for _, stage := range safeStages {
		t.Run(stage, func(t *testing.T) {
			f.t = t
			buyAt := func(i int, user string) int {
				code, body := f.call("POST", f.urls[i]+"/api/v1/products/2/buy", fmt.Sprintf(`{"user_id":%q}`, user),
					map[string]string{"X-Seckill-Stage": stage, "Authorization": "Bearer " + fleetToken})
				if code != 201 && code != 202 && code != 409 {
					t.Fatalf("buy at instance %d: %d %s", i, code, body)
				}
				if code == 202 { // redis-stream: the sale accepted
					return 201
				}
				return code
			}
			for round := 0; round < 3; round++ {
				f.reset("products", 2, 1)
				if code := buyAt(round%3, fmt.Sprint(stage, "-first-", round)); code != 201 {
					t.Fatalf("round %d: the one unit must sell: %d", round, code)
				}
				for i := range f.urls {
					for k := 0; k < 2; k++ { // the second is answered from memory
						if code := buyAt(i, fmt.Sprint(stage, "-late-", round, i, k)); code != 409 {
							t.Fatalf("round %d: instance %d must answer sold out, got %d", round, i, code)
						}
					}
				}
				// Reset through one instance, buy at once through the next.
				f.reset("products", 2, 1)
				next := (round + 1) % 3
				if code := buyAt(next, fmt.Sprint(stage, "-after-", round)); code != 201 {
					t.Fatalf("round %d: right after a reset through instance 1, instance %d still answers sold out", round, next+1)
				}
			}
		})
	}
}

// limitedUser creates a MySQL user that may hold at most maxConns
// connections, with every right on the database of dsn, and returns that
// database's DSN for the user. It stands in for a server whose
// max_connections the fleet's pools add up to more than.
func limitedUser(t *testing.T, dsn string, maxConns int) string {
	t.Helper()
	ctx := context.Background()
	admin, err := store.OpenMySQL(ctx, dsn, store.Pool{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	user := testenv.Name("lim")
	for _, stmt := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'pw-%s' WITH MAX_USER_CONNECTIONS %d", user, user, maxConns),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", cfg.DBName, user),
	} {
		if err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		admin, err := store.OpenMySQL(ctx, dsn, store.Pool{MaxConns: 1})
		if err == nil {
			_ = admin.Exec(ctx, fmt.Sprintf("DROP USER '%s'@'%%'", user))
			_ = admin.Close()
		}
	})
	cfg.User, cfg.Passwd = user, "pw-"+user
	return cfg.FormatDSN()
}

// TestDatabaseOutOfConnectionsIsOverload: a pool larger than what the
// server allows makes MySQL refuse connections in a crowd; each refusal
// answers 503 overloaded with Retry-After, never 500, and nothing is
// oversold. A pool within the server's bound is never refused.
//
// Forced, not hoped for: beside CPU hogs a crowd may never need more than
// the server's connections at once, so a transaction holds the product's
// row until the first buyer is answered overloaded: the buys inside take
// every connection the server allows, and the next need one more. And the
// server forgets closed connections after the client does, so each case
// starts once it holds none of the user's.
func TestDatabaseOutOfConnectionsIsOverload(t *testing.T) {
	skipShort(t)
	const serverAllows = 6
	dsn := testenv.MySQLDSN(t)
	migrated, err := openMySQL(context.Background(), dsn, store.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	if err := migrated.Close(); err != nil {
		t.Fatal(err)
	}
	limited := limitedUser(t, dsn, serverAllows)
	lcfg, err := mysqldriver.ParseDSN(limited)
	if err != nil {
		t.Fatal(err)
	}
	root, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	for _, c := range []struct {
		name    string
		pool    int
		refused bool
	}{{"pool beyond the server's bound", 64, true}, {"pool within it", serverAllows - 1, false}} {
		t.Run(c.name, func(t *testing.T) {
			var held int
			if !testkit.Poll(30*time.Second, func() bool {
				err := root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", lcfg.User).Scan(&held)
				return err == nil && held == 0
			}) {
				t.Fatalf("the server still holds %d connections of the limited user", held)
			}
			db, err := store.OpenMySQL(context.Background(), limited, store.Pool{MaxConns: c.pool})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			cfg, err := config.Load(func(k string) string {
				return map[string]string{"SECKILL_ADMIN_TOKEN": fleetToken, "SECKILL_RECONCILE_INTERVAL": "0s", "SECKILL_STAGE": "db-atomic", "SECKILL_ITEM_QUEUE": "0",
					"SECKILL_REQUEST_TIMEOUT": "30s", "SECKILL_LOCK_WAIT": "20s"}[k]
			})
			if err != nil {
				t.Fatal(err)
			}
			var logs testkit.SyncBuffer
			urls := serveInstancesLog(t, cfg, backends{db: db}, 3, "limited", slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError})))
			f := &fleet{t: t, db: db, urls: urls, client: &http.Client{Timeout: 60 * time.Second}}
			f.reset("products", 1, 50)
			var heard func(int, string)
			if c.refused {
				tx, err := root.Begin()
				if err != nil {
					t.Fatal(err)
				}
				var stock int
				if err := tx.QueryRow("SELECT stock FROM products WHERE id = 1 FOR UPDATE").Scan(&stock); err != nil {
					t.Fatal(err)
				}
				var once sync.Once
				release := func() { once.Do(func() { _ = tx.Rollback() }) }
				t.Cleanup(release)
				defer release() // the crowd is over: nothing to hold for
				heard = func(status int, problem string) {
					if problem == "/problems/overloaded" {
						go release()
					}
				}
			}
			res := crowdWatched(t, urls, fleetToken, "db-atomic", "/api/v1/products/1/buy", 400, 400, func(i int) string {
				return fmt.Sprintf(`{"user_id":"lim-%d","quantity":1}`, i)
			}, heard)
			a := f.audit("products", 1)
			t.Logf("pool %d, server allows %d: answers %v problems %v audit %+v", c.pool, serverAllows, res.codes, res.problems, a)
			if res.codes[500] != 0 || res.transport != 0 || res.noRetryAfter != 0 {
				t.Errorf("a full database must answer 503 with Retry-After: %v, %d transport errors, %d without Retry-After", res.codes, res.transport, res.noRetryAfter)
				t.Logf("server log:\n%.3000s", logs.String())
			}
			if a.Oversold != 0 || !a.Conserved || res.codes[201] != a.Orders {
				t.Errorf("nothing may be oversold or lost: %+v, %d created", a, res.codes[201])
			}
			if refused := res.problems["/problems/overloaded"] > 0; refused != c.refused {
				t.Errorf("overloaded answers: %d, want some: %v", res.problems["/problems/overloaded"], c.refused)
			}
		})
	}
}

// skipShort leaves a test that starts fleets, servers or crowds out of the
// fast tier (go test -short, make test-short).
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a fleet, redis-servers or a crowd; left out of -short")
	}
}
