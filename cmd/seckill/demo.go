package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/embedded"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/web"
)

// demoDefaults differ from serve's: the demo widens the race window so a
// workshop sees overselling with a handful of clicks.
var demoDefaults = map[string]string{
	"SECKILL_CRITICAL_SECTION_DELAY": "5ms",
	"SECKILL_LOG_LEVEL":              "warn",
	// A lab run leaves tens of thousands of records; the demo keeps them
	// long enough for any retry, not for a day.
	"SECKILL_IDEMPOTENCY_TTL": "10m",
}

// runDemo starts the embedded backends and three instances in one process,
// each with its own in-process state, plus a front page on :8080.
func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	front := fs.String("addr", ":8080", "listen address of the front page, which also spreads /api over the instances")
	addrs := fs.String("instances", ":8081,:8082,:8083", "comma-separated listen addresses, one instance each")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	cfg, err := config.Load(withDefaults(getenv, demoDefaults))
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	instAddrs := splitList(*addrs)
	if len(instAddrs) == 0 {
		return fmt.Errorf("%w: -instances lists no address", errUsage)
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = randomToken()
	}
	log := newLogger(stderr, cfg.LogLevel)

	db, err := embedded.OpenSQL(ctx, cfg.DemoDB)
	if err != nil {
		return err
	}
	b := backends{db: db}
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
	b.redis = redis.NewClient(&redis.Options{Addr: servers[0].Addr(), ContextTimeoutEnabled: true})
	b.idem = redis.NewClient(&redis.Options{Addr: servers[4].Addr(), ContextTimeoutEnabled: true})
	for _, s := range servers[1:4] {
		b.redlock = append(b.redlock, redis.NewClient(lock.InstanceOptions(&redis.Options{Addr: s.Addr()})))
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
	ls, err := listen(httpServers...)
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
	frontLs, err := listen(newHTTPServer(*front, frontPage(urls), cfg.RequestTimeout))
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
		fmt.Fprintf(stdout, "  instance %d   %s/   (mode %s)\n", i+1, u, cfg.Mode)
	}
	fmt.Fprintf(stdout, "  admin token  %s\n", cfg.AdminToken)
	fmt.Fprintf(stdout, "try:\n  curl -i -X POST %s/api/v1/products/1/buy -H 'Content-Type: application/json' -d '{\"user_id\":\"alice\",\"quantity\":1}'\n", urls[0])
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
	list, _ := json.Marshal(map[string]any{"instances": urls})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /demo/instances", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(list)
	})
	proxy := func(w http.ResponseWriter, r *http.Request) {
		proxies[next.Add(1)%uint64(len(proxies))].ServeHTTP(w, r)
	}
	mux.HandleFunc("/api/", proxy)
	mux.HandleFunc("/healthz", proxy)
	mux.HandleFunc("/readyz", proxy)
	mux.Handle("/", web.Handler())
	return mux
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

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func randomToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}
