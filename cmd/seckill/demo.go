package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/embedded"
)

// demoDefaults differ from serve's: the demo widens the race window so a
// workshop sees overselling with a handful of clicks.
var demoDefaults = map[string]string{
	"SECKILL_CRITICAL_SECTION_DELAY": "5ms",
	"SECKILL_LOG_LEVEL":              "warn",
	// A lab run leaves tens of thousands of records; the demo keeps them
	// long enough for any retry, not for a day.
	"SECKILL_IDEMPOTENCY_TTL": "10m",
	// Unpaid orders expire within a workshop's attention span, not a
	// quarter of an hour, yet not before an oversold burst has been looked
	// at: a cancellation takes the oversold orders' evidence away. For the
	// lifecycle experiment, run SECKILL_PAYMENT_TIMEOUT=20s make run.
	"SECKILL_PAYMENT_TIMEOUT": "5m",
}

const demoAbout = `Three instances in one process on embedded Redis and SQLite: nothing to install.
The SQL file (SECKILL_DEMO_DB, default .demo/seckill.db) keeps stock and orders
across restarts; delete .demo/ (or run 'make clean') to start from the seed data.
It listens on loopback only unless -network: it prints its admin token.
Demo defaults differ from serve's: SECKILL_CRITICAL_SECTION_DELAY=5ms,
SECKILL_LOG_LEVEL=warn, SECKILL_IDEMPOTENCY_TTL=10m, SECKILL_PAYMENT_TIMEOUT=5m.`

// demoMoveHint tells a user whose ports are taken how to move the demo.
const demoMoveHint = "start the demo on other ports: seckill demo -addr :9080 -instances :9081,:9082,:9083 (with make: make run DEMO_FLAGS='-addr ... -instances ...')"

// runDemo starts the embedded backends and three instances in one process,
// each with its own in-process state, plus a front page on :8080.
func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("demo", "", demoAbout, true)
	front := c.fs.String("addr", ":8080", "listen address of the front page, which also spreads /api over the instances; a bare :port is on loopback unless -network")
	addrs := c.fs.String("instances", ":8081,:8082,:8083", "comma-separated listen addresses, one instance each; a bare :port is on loopback unless -network")
	network := c.fs.Bool("network", false, "listen on every interface for bare :port addresses, so other machines can reach the demo and, with its token, the admin API")
	if err := c.parse(args, stdout); err != nil {
		return err
	}
	if !*network {
		*front = onLoopback(*front)
		*addrs = onLoopback(*addrs)
	}
	cfg, err := config.Load(withDefaults(getenv, demoDefaults))
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	instAddrs := config.SplitList(*addrs)
	if len(instAddrs) == 0 {
		return fmt.Errorf("%w: -instances lists no address", errUsage)
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = randomToken()
	}
	if cfg.RoomKeys == "" { // one key for the demo's instances: any serves any ticket
		cfg.RoomKeys = "demo:" + randomToken()
	}
	log := newLogger(stderr, cfg.LogLevel)

	db, err := embedded.OpenSQL(ctx, cfg.DemoDB)
	if err != nil {
		return err
	}
	b := backends{db: db}
	tokenFile := filepath.Join(filepath.Dir(cfg.DemoDB), "admin-token")
	if err := writeSecret(tokenFile, cfg.AdminToken); err != nil {
		return errors.Join(err, db.Close())
	}
	defer func() {
		// Leave no token behind for a demo that is gone (the lab would try it).
		if got, err := os.ReadFile(tokenFile); err == nil && string(got) == cfg.AdminToken+"\n" {
			_ = os.Remove(tokenFile)
		}
	}()
	// One server for redis-lock, redis-atomic and reconcile, three for
	// redlock, and one for Idempotency-Key records, which are many and live
	// for minutes, so per-command TTL ageing would be slow there.
	servers, err := embedded.StartRedisN(4)
	if err != nil {
		return errors.Join(err, db.Close())
	}
	records, err := embedded.StartRedisForRecords("127.0.0.1:0")
	if err != nil {
		for _, s := range servers {
			s.Close()
		}
		return errors.Join(err, db.Close())
	}
	servers = append(servers, records)
	defer func() {
		closeBackends(b, log)
		for _, s := range servers {
			s.Close()
		}
	}()
	redisOpts, idemOpts := clientOptions(servers[0].Addr()), clientOptions(servers[4].Addr())
	redisOpts.PoolSize, idemOpts.PoolSize = cfg.RedisPool, cfg.RedisPool
	b.redis = redis.NewClient(redisOpts)
	b.batches = redis.NewClient(batchOptions(servers[0].Addr()))
	b.idem = redis.NewClient(idemOpts)
	for _, s := range servers[1:4] {
		b.redlock = append(b.redlock, redlockClient(s.Addr(), "", cfg.RedisPool))
	}

	var httpServers []*http.Server
	var insts []*instance
	defer func() {
		for _, in := range insts {
			if err := in.close(); err != nil {
				log.Error("closing instance", "instance", in.name, "err", err)
			}
		}
	}()
	// Listen first: each instance's dashboard needs every instance's URL
	// (its peers), which ports like :0 only give once bound.
	for _, addr := range instAddrs {
		httpServers = append(httpServers, newHTTPServer(addr, nil, cfg.RequestTimeout))
	}
	ls, err := listen(demoMoveHint, httpServers...)
	if err != nil {
		return err
	}
	var urls []string
	for _, l := range ls {
		urls = append(urls, "http://"+loopbackHost(l.ln.Addr().String()))
	}
	for i, srv := range httpServers {
		icfg := cfg
		icfg.Instance = fmt.Sprintf("demo-%d", i+1)
		icfg.Peers = urls
		in, err := newInstance(icfg, b, log)
		if err != nil {
			for _, l := range ls {
				_ = l.ln.Close() // not served yet
			}
			return err
		}
		insts = append(insts, in)
		srv.Handler = in.handler
	}
	frontLs, err := listen(demoMoveHint, newHTTPServer(*front, frontPage(urls), cfg.RequestTimeout))
	if err != nil {
		for _, l := range ls {
			_ = l.ln.Close() // not served yet
		}
		return err
	}
	ls = append(ls, frontLs...)

	frontURL := "http://" + loopbackHost(frontLs[0].ln.Addr().String())
	fmt.Fprintf(stdout, "seckill demo is running: %d instances on embedded Redis and SQLite (%s)\n", len(urls), cfg.DemoDB)
	fmt.Fprintf(stdout, "  front page   %s/\n", frontURL)
	for i, u := range urls {
		fmt.Fprintf(stdout, "  instance %d   %s/   (stage %s)\n", i+1, u, cfg.Stage)
	}
	fmt.Fprintf(stdout, "  admin token  %s   (also in %s, for the lab)\n", cfg.AdminToken, tokenFile)
	if open := exposed(ls); len(open) > 0 {
		fmt.Fprintf(stdout, "  NETWORK      %s listen beyond this machine: anyone who can reach them can buy, and with the token reset stock\n", strings.Join(open, ", "))
	} else {
		fmt.Fprintln(stdout, "  loopback only: other machines cannot reach the demo (-network opens it)")
	}
	if frontURL == storyDefaultURL {
		fmt.Fprintf(stdout, "see it oversell, then see it stop (one burst per stage), in another terminal:\n  make story   (or: seckill story)\n")
	} else {
		fmt.Fprintf(stdout, "see it oversell, then see it stop (one burst per stage), in another terminal:\n  seckill story -url %s   (with make: make story STORY_FLAGS='-url %s')\n", frontURL, frontURL)
	}
	fmt.Fprintf(stdout, "one buy by hand:\n  curl -i -X POST %s/api/v1/products/1/buy -H 'Content-Type: application/json' -d '{\"user_id\":\"alice\",\"quantity\":1}'\n", urls[0])
	fmt.Fprintln(stdout, "press Ctrl-C to stop")
	return serveUntil(ctx, ls, cfg.ShutdownTimeout, log)
}

// frontPage serves the web pages, lists the instances at /demo/instances,
// and spreads every other API call round-robin over the instances, as the
// nginx of docker-compose.yml does.
func frontPage(urls []string) http.Handler {
	proxies := make([]*httputil.ReverseProxy, len(urls))
	for i, u := range urls {
		target, err := url.Parse(u)
		if err != nil {
			panic(err) // built above from a listener address
		}
		proxies[i] = httputil.NewSingleHostReverseProxy(target)
	}
	var next atomic.Uint64
	list, _ := json.Marshal(api.DemoInstances{Instances: urls})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /demo/instances", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(list)
	})
	proxy := func(w http.ResponseWriter, r *http.Request) {
		proxies[next.Add(1)%uint64(len(proxies))].ServeHTTP(w, r)
	}
	// Everything else is an instance's: the API, the pages of the
	// dashboard (each instance serves them), and the answers for what
	// exists nowhere (problem+json).
	mux.HandleFunc("/", proxy)
	return mux
}

// onLoopback puts every bare ":port" of a comma-separated list on 127.0.0.1:
// the demo prints its admin token, so by default nothing beyond this
// machine may reach it. Addresses with a host are left as given.
func onLoopback(list string) string {
	parts := strings.Split(list, ",")
	for i, a := range parts {
		if a = strings.TrimSpace(a); strings.HasPrefix(a, ":") {
			parts[i] = "127.0.0.1" + a
		}
	}
	return strings.Join(parts, ",")
}

// exposed lists the bound addresses that are not loopback.
func exposed(ls []listener) []string {
	var open []string
	for _, l := range ls {
		if a, ok := l.ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
			open = append(open, a.String())
		}
	}
	return open
}

// loopbackHost turns a wildcard listen address into one a browser can open.
func loopbackHost(addr string) string {
	if strings.HasPrefix(addr, "[::]:") {
		return "localhost:" + strings.TrimPrefix(addr, "[::]:")
	}
	if strings.HasPrefix(addr, "0.0.0.0:") {
		return "localhost:" + strings.TrimPrefix(addr, "0.0.0.0:")
	}
	return addr
}

// writeSecret writes s to a new file that only this user can read: an old
// file is removed first, since rewriting it would keep its permissions.
func writeSecret(path, s string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write the admin token: %w", err)
	}
	_, werr := f.WriteString(s + "\n")
	return errors.Join(werr, f.Close())
}

func randomToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}
