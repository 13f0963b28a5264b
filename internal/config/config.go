// Package config reads seckill's settings from SECKILL_* environment
// variables, once, at start. Defaults and validation live here and nowhere
// else, so a reader can see every knob in one file and a bad value fails fast
// with a message that names the variable to fix.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
)

// Stages lists the evolution stages (the API calls them modes) in teaching
// order. The composition root builds one of each that its backends allow.
var Stages = []string{"unlocked", "local-mutex", "redis-lock", "redlock", "db-atomic", "redis-atomic"}

// Config is the effective configuration of one process.
type Config struct {
	Addr                  string        // SECKILL_ADDR: listen address of `serve`
	Instance              string        // SECKILL_INSTANCE: name in X-Seckill-Instance
	Mode                  string        // SECKILL_MODE: default stage of buys and grabs
	MySQLDSN              string        // SECKILL_MYSQL_DSN: source of truth for `serve`
	RedisAddrs            []string      // SECKILL_REDIS_ADDR: one address, or several cluster nodes
	RedisPassword         string        // SECKILL_REDIS_PASSWORD
	RedlockAddrs          []string      // SECKILL_REDLOCK_ADDRS: independent servers for `redlock`
	AdminToken            string        // SECKILL_ADMIN_TOKEN: admin routes are off when empty
	CriticalSectionDelay  time.Duration // SECKILL_CRITICAL_SECTION_DELAY: widens the race window
	LockTTL               time.Duration // SECKILL_LOCK_TTL
	LockWait              time.Duration // SECKILL_LOCK_WAIT: bound on waiting for a lock
	RequestTimeout        time.Duration // SECKILL_REQUEST_TIMEOUT: bound on one request's work
	Fencing               bool          // SECKILL_FENCING: fencing token checked at the stock write
	RequireIdempotencyKey bool          // SECKILL_REQUIRE_IDEMPOTENCY_KEY
	IdempotencyTTL        time.Duration // SECKILL_IDEMPOTENCY_TTL
	ReconcileInterval     time.Duration // SECKILL_RECONCILE_INTERVAL: 0 turns the job off
	ShutdownTimeout       time.Duration // SECKILL_SHUTDOWN_TIMEOUT: bound on draining in-flight requests
	LogLevel              slog.Level    // SECKILL_LOG_LEVEL: debug, info, warn, error
	DemoDB                string        // SECKILL_DEMO_DB: SQL file of the embedded demo
	BurstMax              int           // SECKILL_BURST_MAX: cap on the dashboard's server-side burst
	Peers                 []string      // SECKILL_PEERS: base URLs of the fleet, for the dashboard's burst
	LabReports            string        // SECKILL_LAB_REPORTS: folder of the lab's reports, shown by the dashboard
}

// vars lists every variable Load reads, with its default. It is the one
// place to add a setting; EnvNames and the docs are derived from it.
var vars = []struct{ name, def, help string }{
	{"SECKILL_ADDR", ":8081", "listen address of serve"},
	{"SECKILL_INSTANCE", "", "instance name shown in X-Seckill-Instance (default: host name)"},
	{"SECKILL_MODE", "redis-lock", "default stage: " + strings.Join(Stages, ", ")},
	{"SECKILL_MYSQL_DSN", "", "MySQL DSN for serve and migrate, e.g. root:pw@tcp(127.0.0.1:3306)/seckill"},
	{"SECKILL_REDIS_ADDR", "", "Redis address; a comma-separated list means Redis Cluster nodes"},
	{"SECKILL_REDIS_PASSWORD", "", "Redis password (masked in logs)"},
	{"SECKILL_REDLOCK_ADDRS", "", "comma-separated independent Redis servers for the redlock stage"},
	{"SECKILL_ADMIN_TOKEN", "", "bearer token for /api/v1/admin; admin routes are disabled when empty"},
	{"SECKILL_CRITICAL_SECTION_DELAY", "0s", "pause between reading and writing stock in the lock stages"},
	{"SECKILL_LOCK_TTL", "5s", "lease TTL of the Redis lock (the watchdog renews it every TTL/3)"},
	{"SECKILL_LOCK_WAIT", "2s", "how long a buy waits for the lock before 429 lock-timeout"},
	{"SECKILL_REQUEST_TIMEOUT", "4s", "bound on one buy's work: a backend that never answers costs 503 timeout, not a hang"},
	{"SECKILL_FENCING", "true", "check the lock's fencing token at the stock write"},
	{"SECKILL_REQUIRE_IDEMPOTENCY_KEY", "false", "reject buys and grabs without an Idempotency-Key"},
	{"SECKILL_IDEMPOTENCY_TTL", "24h", "how long Idempotency-Key records are kept"},
	{"SECKILL_RECONCILE_INTERVAL", "10s", "period of the fleet-wide reconcile job; 0 disables it"},
	{"SECKILL_SHUTDOWN_TIMEOUT", "10s", "how long shutdown waits for in-flight requests"},
	{"SECKILL_LOG_LEVEL", "info", "debug, info, warn or error"},
	{"SECKILL_DEMO_DB", ".demo/seckill.db", "SQL file of the embedded demo database"},
	{"SECKILL_BURST_MAX", "2000", "largest burst the dashboard may ask the server to fire"},
	{"SECKILL_PEERS", "", "comma-separated base URLs of every instance, for the dashboard's burst (default: this instance)"},
	{"SECKILL_LAB_REPORTS", "loadtest/reports", "folder of the lab's reports, shown by the dashboard"},
}

// EnvNames returns the names of every variable Load reads.
func EnvNames() []string {
	names := make([]string, len(vars))
	for i, v := range vars {
		names[i] = v.name
	}
	return names
}

// Help returns one line per variable: name, default and meaning.
func Help() string {
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "  %-34s %s (default %q)\n", v.name, v.help, v.def)
	}
	return b.String()
}

// Load reads the configuration through getenv (os.Getenv in production, a
// map in tests). It returns every problem at once, each naming its variable.
func Load(getenv func(string) string) (Config, error) {
	p := parser{getenv: getenv}
	c := Config{
		Addr:                  p.str("SECKILL_ADDR"),
		Instance:              p.str("SECKILL_INSTANCE"),
		Mode:                  p.str("SECKILL_MODE"),
		MySQLDSN:              p.str("SECKILL_MYSQL_DSN"),
		RedisAddrs:            p.list("SECKILL_REDIS_ADDR"),
		RedisPassword:         p.str("SECKILL_REDIS_PASSWORD"),
		RedlockAddrs:          p.list("SECKILL_REDLOCK_ADDRS"),
		AdminToken:            p.str("SECKILL_ADMIN_TOKEN"),
		CriticalSectionDelay:  p.duration("SECKILL_CRITICAL_SECTION_DELAY", 0, time.Minute),
		LockTTL:               p.duration("SECKILL_LOCK_TTL", 100*time.Millisecond, time.Hour),
		LockWait:              p.duration("SECKILL_LOCK_WAIT", 0, time.Minute),
		RequestTimeout:        p.duration("SECKILL_REQUEST_TIMEOUT", 100*time.Millisecond, 10*time.Minute),
		Fencing:               p.boolean("SECKILL_FENCING"),
		RequireIdempotencyKey: p.boolean("SECKILL_REQUIRE_IDEMPOTENCY_KEY"),
		IdempotencyTTL:        p.duration("SECKILL_IDEMPOTENCY_TTL", time.Second, 30*24*time.Hour),
		ReconcileInterval:     p.duration("SECKILL_RECONCILE_INTERVAL", 0, 24*time.Hour),
		ShutdownTimeout:       p.duration("SECKILL_SHUTDOWN_TIMEOUT", 0, 10*time.Minute),
		LogLevel:              p.level("SECKILL_LOG_LEVEL"),
		DemoDB:                p.str("SECKILL_DEMO_DB"),
		BurstMax:              p.integer("SECKILL_BURST_MAX", 1, 100000),
		Peers:                 p.list("SECKILL_PEERS"),
		LabReports:            p.str("SECKILL_LAB_REPORTS"),
	}
	if c.Instance == "" {
		if h, err := os.Hostname(); err == nil {
			c.Instance = h
		} else {
			c.Instance = "seckill"
		}
	}
	if !ValidStage(c.Mode) {
		p.fail("SECKILL_MODE", fmt.Errorf("unknown stage %q; want one of %s", c.Mode, strings.Join(Stages, ", ")))
	}
	if c.LockWait >= c.RequestTimeout && c.RequestTimeout > 0 {
		p.fail("SECKILL_LOCK_WAIT", fmt.Errorf("%s must be shorter than SECKILL_REQUEST_TIMEOUT (%s), or every long wait ends as a request timeout", c.LockWait, c.RequestTimeout))
	}
	if c.ReconcileInterval > 0 && c.ReconcileInterval < 100*time.Millisecond {
		p.fail("SECKILL_RECONCILE_INTERVAL", errors.New("must be 0 (off) or at least 100ms"))
	}
	if c.AdminToken != "" && len(c.AdminToken) < 8 {
		p.fail("SECKILL_ADMIN_TOKEN", errors.New("must be at least 8 characters"))
	}
	return c, errors.Join(p.errs...)
}

// ValidStage reports whether name is one of Stages.
func ValidStage(name string) bool {
	for _, s := range Stages {
		if s == name {
			return true
		}
	}
	return false
}

// LogValue masks secrets so the effective config can be logged at start.
func (c Config) LogValue() slog.Value {
	mask := func(s string) string {
		if s == "" {
			return ""
		}
		return "***"
	}
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.String("instance", c.Instance),
		slog.String("mode", c.Mode),
		slog.String("mysql_dsn", maskDSN(c.MySQLDSN)),
		slog.Any("redis_addr", c.RedisAddrs),
		slog.String("redis_password", mask(c.RedisPassword)),
		slog.Any("redlock_addrs", c.RedlockAddrs),
		slog.String("admin_token", mask(c.AdminToken)),
		slog.Duration("critical_section_delay", c.CriticalSectionDelay),
		slog.Duration("lock_ttl", c.LockTTL),
		slog.Duration("lock_wait", c.LockWait),
		slog.Duration("request_timeout", c.RequestTimeout),
		slog.Bool("fencing", c.Fencing),
		slog.Bool("require_idempotency_key", c.RequireIdempotencyKey),
		slog.Duration("idempotency_ttl", c.IdempotencyTTL),
		slog.Duration("reconcile_interval", c.ReconcileInterval),
		slog.Duration("shutdown_timeout", c.ShutdownTimeout),
		slog.String("log_level", c.LogLevel.String()),
	)
}

// maskDSN hides the password of a go-sql-driver DSN (user:password@...).
func maskDSN(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return dsn
	}
	cred := dsn[:at]
	if colon := strings.Index(cred, ":"); colon >= 0 {
		return cred[:colon] + ":***" + dsn[at:]
	}
	return dsn
}

type parser struct {
	getenv func(string) string
	errs   []error
}

func (p *parser) fail(name string, err error) {
	p.errs = append(p.errs, fmt.Errorf("%s: %w", name, err))
}

func (p *parser) str(name string) string {
	if v := strings.TrimSpace(p.getenv(name)); v != "" {
		return v
	}
	for _, v := range vars {
		if v.name == name {
			return v.def
		}
	}
	panic("config: undeclared variable " + name)
}

func (p *parser) list(name string) []string {
	var out []string
	for _, part := range strings.Split(p.str(name), ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func (p *parser) duration(name string, lo, hi time.Duration) time.Duration {
	raw := p.str(name)
	d, err := time.ParseDuration(raw)
	if err != nil {
		p.fail(name, fmt.Errorf("%q is not a duration such as 250ms or 5s", raw))
		return 0
	}
	if d < lo || d > hi {
		p.fail(name, fmt.Errorf("%s is out of range [%s, %s]", d, lo, hi))
	}
	return d
}

func (p *parser) boolean(name string) bool {
	raw := p.str(name)
	b, err := strconv.ParseBool(raw)
	if err != nil {
		p.fail(name, fmt.Errorf("%q is not true or false", raw))
	}
	return b
}

func (p *parser) integer(name string, lo, hi int) int {
	raw := p.str(name)
	n, err := strconv.Atoi(raw)
	if err != nil {
		p.fail(name, fmt.Errorf("%q is not a whole number", raw))
		return 0
	}
	if n < lo || n > hi {
		p.fail(name, fmt.Errorf("%d is out of range [%d, %d]", n, lo, hi))
	}
	return n
}

func (p *parser) level(name string) slog.Level {
	raw := p.str(name)
	var l slog.Level
	if err := l.UnmarshalText([]byte(raw)); err != nil {
		p.fail(name, fmt.Errorf("%q is not one of debug, info, warn, error", raw))
	}
	return l
}
