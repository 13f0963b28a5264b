// Package config reads seckill's settings from SECKILL_* environment
// variables, once, at start. Defaults and validation live here and nowhere
// else, so a reader can see every knob in one file and a bad value fails fast
// with a message that names the variable to fix.
package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
)

// DefaultDemoDB is the demo's SQL file unless SECKILL_DEMO_DB says
// otherwise; the demo's admin token is written beside it.
const DefaultDemoDB = ".demo/seckill.db"

// Config is the effective configuration of one process. Each field is read
// from the variable that settings() binds to it.
type Config struct {
	Addr                  string         // SECKILL_ADDR: listen address of `serve`
	Instance              string         // SECKILL_INSTANCE: name in X-Seckill-Instance
	Stage                 string         // SECKILL_STAGE (formerly SECKILL_MODE): default stage of buys and grabs
	MySQLDSN              string         // SECKILL_MYSQL_DSN: source of truth for `serve`
	MySQLMaxConns         int            // SECKILL_MYSQL_MAX_CONNS: bound on this process's MySQL connections
	MySQLConnLifetime     time.Duration  // SECKILL_MYSQL_CONN_LIFETIME: oldest a pooled MySQL connection gets
	RedisAddrs            []string       // SECKILL_REDIS_ADDR: one address, or several cluster nodes
	RedisPassword         string         // SECKILL_REDIS_PASSWORD
	RedisSentinels        []string       // SECKILL_REDIS_SENTINELS: Sentinel addresses; the app then talks to the primary they name
	RedisMaster           string         // SECKILL_REDIS_MASTER: the Sentinel group's master name
	RedisSentinelPassword string         // SECKILL_REDIS_SENTINEL_PASSWORD: password of the Sentinels themselves
	RedisPool             int            // SECKILL_REDIS_POOL: connections per Redis server (0: go-redis's 10 per CPU)
	RedlockAddrs          []string       // SECKILL_REDLOCK_ADDRS: independent servers for `redlock`
	AdminToken            string         // SECKILL_ADMIN_TOKEN: admin routes are off when empty
	AdminTokenFile        string         // SECKILL_ADMIN_TOKEN_FILE: where AdminToken is read from when it is empty
	RoomKeys              string         // SECKILL_ROOM_KEYS: the waiting rooms' signing keys, id:secret[,id:secret]
	RoomKeysFile          string         // SECKILL_ROOM_KEYS_FILE: where RoomKeys is read from when it is empty
	CriticalSectionDelay  time.Duration  // SECKILL_CRITICAL_SECTION_DELAY: widens the race window
	LockTTL               time.Duration  // SECKILL_LOCK_TTL
	LockWait              time.Duration  // SECKILL_LOCK_WAIT: bound on waiting for a lock
	LockReplicas          int            // SECKILL_LOCK_REPLICAS: replicas that must confirm a redis-lock grant
	LockFair              bool           // SECKILL_LOCK_FAIR: redis-lock grants in arrival order across the fleet
	ItemQueue             int            // SECKILL_ITEM_QUEUE: buyers of one item always let in line per instance (0: no cap)
	ItemQueueMax          int            // SECKILL_ITEM_QUEUE_MAX: longest that line grows while it is served within SECKILL_LOCK_WAIT
	SoldOutLease          time.Duration  // SECKILL_SOLD_OUT_LEASE: how long an instance trusts a remembered restock epoch
	RequestTimeout        time.Duration  // SECKILL_REQUEST_TIMEOUT: bound on one request's work
	Fencing               bool           // SECKILL_FENCING: fencing token checked at the stock write
	RequireIdempotencyKey bool           // SECKILL_REQUIRE_IDEMPOTENCY_KEY
	IdempotencyTTL        time.Duration  // SECKILL_IDEMPOTENCY_TTL
	IdempotencyReplicas   int            // SECKILL_IDEMPOTENCY_REPLICAS: replicas that must confirm each Idempotency-Key claim and settle
	ReconcileInterval     time.Duration  // SECKILL_RECONCILE_INTERVAL: 0 turns the job off
	PaymentTimeout        time.Duration  // SECKILL_PAYMENT_TIMEOUT: unpaid orders are cancelled after it; 0 never
	StreamMaxLen          int            // SECKILL_STREAM_MAX_LEN: bound on redis-stream's queue per item
	StreamClaimIdle       time.Duration  // SECKILL_STREAM_CLAIM_IDLE: when another writer takes an entry over
	StreamDurability      string         // SECKILL_STREAM_DURABILITY: what must hold before redis-stream answers 202
	StreamReplicaWait     time.Duration  // SECKILL_STREAM_REPLICA_WAIT: bound on waiting for a replica at durability replica
	ShutdownTimeout       time.Duration  // SECKILL_SHUTDOWN_TIMEOUT: bound on draining in-flight requests
	LogLevel              slog.Level     // SECKILL_LOG_LEVEL: debug, info, warn, error
	DemoDB                string         // SECKILL_DEMO_DB: SQL file of the embedded demo (DefaultDemoDB)
	BurstMax              int            // SECKILL_BURST_MAX: cap on the dashboard's server-side burst
	Peers                 []string       // SECKILL_PEERS: base URLs of the fleet, for the dashboard's burst
	LabReports            string         // SECKILL_LAB_REPORTS: folder of the lab's reports, shown by the dashboard
	RateInterval          time.Duration  // SECKILL_RATE_INTERVAL: a buyer's sustained rate, as the time between two buys; 0: no limit
	RateBurst             int            // SECKILL_RATE_BURST: buys a buyer may send at once
	RateLimitBy           []string       // SECKILL_RATE_LIMIT_BY: account, address, or both
	TrustedProxies        []netip.Prefix // SECKILL_TRUSTED_PROXIES: peers whose X-Forwarded-For is believed
	StockBuckets          int            // SECKILL_STOCK_BUCKETS: buckets redis-sharded splits one item's stock over
	StockSweepInterval    time.Duration  // SECKILL_STOCK_SWEEP_INTERVAL: period of redis-sharded's sweeper
	GroupLinger           time.Duration  // SECKILL_GROUP_LINGER: how long the Redis stages' next order group waits for more sales
	StockSweepBelow       int            // SECKILL_STOCK_SWEEP_BELOW: units left at or below which the sweeper gathers them
	FreezeFencedWrite     bool           // SECKILL_FREEZE_BEFORE_FENCED_WRITE: fault injection for the chaos suite only
}

// settings binds every variable to its field of c, with its default, its
// help and how it is parsed and logged. It is the one place to add a
// setting (besides the field): Load, LogValue, Help and EnvNames all range
// over it.
func (c *Config) settings() []setting {
	return []setting{
		text(&c.Addr, "SECKILL_ADDR", ":8081", "listen address of serve"),
		text(&c.Instance, "SECKILL_INSTANCE", "", "instance name shown in X-Seckill-Instance (default: host name)"),
		formerly("SECKILL_MODE", text(&c.Stage, "SECKILL_STAGE", inventory.StageRedisLock, "default stage: "+strings.Join(inventory.Stages, ", "))),
		dsn(&c.MySQLDSN, "SECKILL_MYSQL_DSN", "", "MySQL DSN for serve and migrate, e.g. root:pw@tcp(127.0.0.1:3306)/seckill; seckill turns on clientFoundRows, parseTime, interpolateParams and multiStatements itself"),
		integer(&c.MySQLMaxConns, "SECKILL_MYSQL_MAX_CONNS", "32", 1, 10000, "most MySQL connections one instance opens; keep instances x this below the server's max_connections (151 by default)"),
		duration(&c.MySQLConnLifetime, "SECKILL_MYSQL_CONN_LIFETIME", "5m", time.Second, 24*time.Hour, "pooled MySQL connections older than this are closed and reopened; keep it below the server's wait_timeout and any proxy's idle timeout"),
		list(&c.RedisAddrs, "SECKILL_REDIS_ADDR", "", "Redis address (host:port, or unix:/path/to/redis.sock on the same machine); a comma-separated list of host:port means Redis Cluster nodes"),
		secret(&c.RedisPassword, "SECKILL_REDIS_PASSWORD", "Redis password (masked in logs)"),
		list(&c.RedisSentinels, "SECKILL_REDIS_SENTINELS", "", "comma-separated Redis Sentinel addresses, instead of SECKILL_REDIS_ADDR: the app asks them for the primary of SECKILL_REDIS_MASTER and follows it across failovers"),
		text(&c.RedisMaster, "SECKILL_REDIS_MASTER", "", "master name the Sentinels monitor (sentinel monitor <name> ...); required with SECKILL_REDIS_SENTINELS"),
		secret(&c.RedisSentinelPassword, "SECKILL_REDIS_SENTINEL_PASSWORD", "password of the Sentinels (requirepass in sentinel.conf), when they have one (masked in logs)"),
		integer(&c.RedisPool, "SECKILL_REDIS_POOL", "0", 0, 100_000, "most connections to each Redis server (0: go-redis's default, 10 per CPU); buyers beyond it wait for a free one"),
		list(&c.RedlockAddrs, "SECKILL_REDLOCK_ADDRS", "", "comma-separated independent Redis servers for the redlock stage (host:port or unix:/path/to/redis.sock)"),
		secret(&c.AdminToken, "SECKILL_ADMIN_TOKEN", "bearer token for /api/v1/admin; admin routes are disabled when empty"),
		text(&c.AdminTokenFile, "SECKILL_ADMIN_TOKEN_FILE", "", "file holding the admin token, read at start when SECKILL_ADMIN_TOKEN is empty (docker-compose.yml's token service writes one)"),
		secret(&c.RoomKeys, "SECKILL_ROOM_KEYS", "the waiting rooms' signing keys, id:secret[,id:secret] (secrets of 16 bytes or more): the first signs tickets and passes, each verifies them, so a fleet rotates by adding the new key second, then first, then dropping the old; empty: a random key of this process alone"),
		text(&c.RoomKeysFile, "SECKILL_ROOM_KEYS_FILE", "", "file holding SECKILL_ROOM_KEYS, read at start when it is empty"),
		duration(&c.CriticalSectionDelay, "SECKILL_CRITICAL_SECTION_DELAY", "0s", 0, time.Minute, "pause between reading and writing stock in the lock stages"),
		duration(&c.LockTTL, "SECKILL_LOCK_TTL", "5s", 100*time.Millisecond, time.Hour, "lease TTL of the Redis lock (the watchdog renews it every TTL/3)"),
		duration(&c.LockWait, "SECKILL_LOCK_WAIT", "2s", 0, time.Minute, "how long a buy waits for the lock before 429 lock-timeout"),
		integer(&c.LockReplicas, "SECKILL_LOCK_REPLICAS", "0", 0, 16, "replicas that must acknowledge each redis-lock grant and renewal (WAIT, within 100ms) before it is trusted; an unconfirmed grant is given back and the buy answered 503 unavailable (0: off; not for a Cluster)"),
		boolean(&c.LockFair, "SECKILL_LOCK_FAIR", "false", "redis-lock in the lock's fair mode: buyers of one item join one line in Redis on arrival and get the lock in that order across every instance, so a late buyer cannot take it from one who waits; costs a Redis try per waiting buyer and a renewal script a second per item and instance (off: each instance's next buyer races the others' on every release)"),
		integer(&c.ItemQueue, "SECKILL_ITEM_QUEUE", "64", 0, 1_000_000, "buyers of one item always let in line for its lock, row or script on one instance (0: no cap at all); past them a buyer gets in only if the line is served within SECKILL_LOCK_WAIT at its recent pace, the rest get 503 overloaded at once"),
		integer(&c.ItemQueueMax, "SECKILL_ITEM_QUEUE_MAX", "4096", 0, 1_000_000, "longest the line of one item on one instance grows past SECKILL_ITEM_QUEUE while it is served within SECKILL_LOCK_WAIT (at or below SECKILL_ITEM_QUEUE: the line stays at SECKILL_ITEM_QUEUE)"),
		duration(&c.SoldOutLease, "SECKILL_SOLD_OUT_LEASE", "1s", 10*time.Millisecond, time.Minute, "how long an instance answers a sold-out item from memory without rereading its restock epoch; a reset waits this long, so that no instance still answers sold out once it returns"),
		duration(&c.RequestTimeout, "SECKILL_REQUEST_TIMEOUT", "4s", 100*time.Millisecond, 10*time.Minute, "bound on one buy's work: a backend that never answers costs 503 timeout, not a hang"),
		boolean(&c.Fencing, "SECKILL_FENCING", "true", "check the lock's fencing token at the stock write"),
		boolean(&c.RequireIdempotencyKey, "SECKILL_REQUIRE_IDEMPOTENCY_KEY", "false", "reject buys, grabs and payments without an Idempotency-Key"),
		duration(&c.IdempotencyTTL, "SECKILL_IDEMPOTENCY_TTL", "24h", time.Second, 30*24*time.Hour, "how long Idempotency-Key records are kept"),
		integer(&c.IdempotencyReplicas, "SECKILL_IDEMPOTENCY_REPLICAS", "0", 0, 16, "replicas that must confirm each Idempotency-Key claim and stored answer (WAIT, within SECKILL_STREAM_REPLICA_WAIT, on the connection to the record's master, so also on a Cluster) before the request runs or its answer is told: a claim they do not confirm is given back and answered 503 unavailable, an answer 503 outcome-unknown (0: off, unless SECKILL_STREAM_DURABILITY=replica, which sets 1)"),
		duration(&c.ReconcileInterval, "SECKILL_RECONCILE_INTERVAL", "10s", 0, 24*time.Hour, "period of the fleet-wide reconcile job and of the payment-timeout job; 0 disables both"),
		duration(&c.PaymentTimeout, "SECKILL_PAYMENT_TIMEOUT", "15m", 0, 30*24*time.Hour, "how long a buyer has to pay an order before it is cancelled and its units return to stock; 0: orders never expire"),
		integer(&c.StreamMaxLen, "SECKILL_STREAM_MAX_LEN", "100000", 1, 100_000_000, "most orders redis-stream keeps queued per item; a buy that finds the queue full gets 503 overloaded"),
		duration(&c.StreamClaimIdle, "SECKILL_STREAM_CLAIM_IDLE", "10s", 100*time.Millisecond, time.Hour, "how long a queued order may wait unacknowledged by its writer before another instance's writer takes it over"),
		text(&c.StreamDurability, "SECKILL_STREAM_DURABILITY", string(redisstage.DurabilityNone), "what must hold before redis-stream answers 202: none (Redis has the order in memory), fsync (Redis runs appendonly yes and appendfsync always; checked at start) or replica (WAIT confirms a replica has it; otherwise 503 outcome-unknown)"),
		duration(&c.StreamReplicaWait, "SECKILL_STREAM_REPLICA_WAIT", "100ms", time.Millisecond, 10*time.Second, "how long a redis-stream buy at durability replica waits for a replica to confirm its order"),
		integer(&c.StockBuckets, "SECKILL_STOCK_BUCKETS", "4", 1, 1024, "buckets redis-sharded splits one item's stock over, each a Redis key with its own hash tag (on a Cluster, spread over the shards); a buyer whose bucket is empty tries the others"),
		duration(&c.StockSweepInterval, "SECKILL_STOCK_SWEEP_INTERVAL", "1s", 0, time.Hour, "period of redis-sharded's sweeper, which gathers an item's last units into its fullest bucket (each move written down first, so a cut one is finished by the next sweep, the reconcile job or a buyer); 0: no sweeper"),
		duration(&c.GroupLinger, "SECKILL_GROUP_LINGER", "0s", 0, 50*time.Millisecond, "how long redis-atomic's and redis-sharded's group commit, after a write during which more sales arrived, waits for the sales still on their way before it writes the next group (less when a full group of 64 waits); a sale that finds its item idle never waits; 0 (the default): never; measured in docs/performance.md"),
		integer(&c.StockSweepBelow, "SECKILL_STOCK_SWEEP_BELOW", "16", 1, 1_000_000, "units left in redis-sharded's buckets at or below which the sweeper gathers them into one bucket"),
		duration(&c.ShutdownTimeout, "SECKILL_SHUTDOWN_TIMEOUT", "10s", 0, 10*time.Minute, "how long shutdown waits for in-flight requests"),
		level(&c.LogLevel, "SECKILL_LOG_LEVEL", "info", "debug, info, warn or error"),
		text(&c.DemoDB, "SECKILL_DEMO_DB", DefaultDemoDB, "SQL file of the embedded demo database"),
		integer(&c.BurstMax, "SECKILL_BURST_MAX", "2000", 1, 100000, "largest burst the dashboard may ask the server to fire"),
		list(&c.Peers, "SECKILL_PEERS", "", "comma-separated base URLs of every instance, for the dashboard's burst (default: this instance)"),
		text(&c.LabReports, "SECKILL_LAB_REPORTS", "loadtest/reports", "folder of the lab's reports, shown by the dashboard"),
		duration(&c.RateInterval, "SECKILL_RATE_INTERVAL", "0s", 0, time.Hour, "fleet-wide rate limit of the safe stages' buys and grabs, as the time between two of one buyer's at the sustained rate (100ms: 10 a second); over it, 429 rate-limited; 0: no limit"),
		integer(&c.RateBurst, "SECKILL_RATE_BURST", "5", 1, 1_000_000, "buys and grabs one buyer may send at once before SECKILL_RATE_INTERVAL applies"),
		list(&c.RateLimitBy, "SECKILL_RATE_LIMIT_BY", "account", "what the rate limit counts: account (the user_id), address (the client's IP), or account,address (each on its own)"),
		prefixes(&c.TrustedProxies, "SECKILL_TRUSTED_PROXIES", "", "comma-separated proxies (IPs or CIDRs) whose X-Forwarded-For names the client, for SECKILL_RATE_LIMIT_BY=address; from any other peer the header is ignored"),
		boolean(&c.FreezeFencedWrite, "SECKILL_FREEZE_BEFORE_FENCED_WRITE", "false", "fault injection for the chaos suite, never for production: serve's first fenced stock write (a lock stage with fencing on) stops the whole process (SIGSTOP to itself) after its last check of the lease, as its batch is about to go to MySQL, until something sends SIGCONT; unix only"),
	}
}

// EnvNames returns the names of every variable Load reads.
func EnvNames() []string {
	var names []string
	for _, s := range new(Config).settings() {
		names = append(names, s.name)
	}
	return names
}

// Help returns one line per variable: name, meaning and default.
func Help() string {
	var b strings.Builder
	for _, s := range new(Config).settings() {
		fmt.Fprintf(&b, "  %-34s %s", s.name, s.help)
		if s.def != "" {
			fmt.Fprintf(&b, " (default %q)", s.def)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Load reads the configuration through getenv (os.Getenv in production, a
// map in tests). It returns every problem at once, each naming its variable.
func Load(getenv func(string) string) (Config, error) {
	var c Config
	var errs []error
	for _, s := range c.settings() {
		raw := strings.TrimSpace(getenv(s.name))
		if s.alias != "" {
			old := strings.TrimSpace(getenv(s.alias))
			if raw != "" && old != "" && old != raw {
				errs = append(errs, fmt.Errorf("%s: %q, but its former name %s says %q; set %s alone", s.name, raw, s.alias, old, s.name))
				continue
			}
			if raw == "" {
				raw = old
			}
		}
		if raw == "" {
			raw = s.def
		}
		if err := s.parse(raw); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	if c.Instance == "" {
		if h, err := os.Hostname(); err == nil {
			c.Instance = h
		} else {
			c.Instance = "seckill"
		}
	}
	fail := func(name string, err error) { errs = append(errs, fmt.Errorf("%s: %w", name, err)) }
	if !inventory.ValidStage(c.Stage) {
		fail("SECKILL_STAGE", fmt.Errorf("unknown stage %q; want one of %s", c.Stage, strings.Join(inventory.Stages, ", ")))
	}
	for _, by := range c.RateLimitBy {
		if by != "account" && by != "address" {
			fail("SECKILL_RATE_LIMIT_BY", fmt.Errorf("%q: want account, address, or both", by))
		}
	}
	if !slices.Contains(redisstage.Durabilities, c.StreamDurability) {
		fail("SECKILL_STREAM_DURABILITY", fmt.Errorf("unknown level %q; want one of %s", c.StreamDurability, strings.Join(redisstage.Durabilities, ", ")))
	}
	if c.StreamDurability == string(redisstage.DurabilityReplica) && len(c.RedisAddrs) > 1 {
		fail("SECKILL_STREAM_DURABILITY", errors.New("replica needs one server or a Sentinel group, not a Cluster: WAIT must follow the enqueue on its connection, which a Cluster client splits by slot"))
	}
	if c.LockReplicas > 0 && len(c.RedisAddrs) > 1 {
		fail("SECKILL_LOCK_REPLICAS", errors.New("needs one server or a Sentinel group, not a Cluster: WAIT must follow the lock's script on its connection"))
	}
	if c.StreamReplicaWait >= c.RequestTimeout && c.RequestTimeout > 0 {
		fail("SECKILL_STREAM_REPLICA_WAIT", fmt.Errorf("%s must be shorter than SECKILL_REQUEST_TIMEOUT (%s)", c.StreamReplicaWait, c.RequestTimeout))
	}
	if c.LockWait >= c.RequestTimeout && c.RequestTimeout > 0 {
		fail("SECKILL_LOCK_WAIT", fmt.Errorf("%s must be shorter than SECKILL_REQUEST_TIMEOUT (%s), or every long wait ends as a request timeout", c.LockWait, c.RequestTimeout))
	}
	switch {
	case len(c.RedisSentinels) > 0 && len(c.RedisAddrs) > 0:
		fail("SECKILL_REDIS_SENTINELS", errors.New("set either SECKILL_REDIS_ADDR (one server or Cluster nodes) or SECKILL_REDIS_SENTINELS (a Sentinel group), not both"))
	case len(c.RedisSentinels) > 0 && c.RedisMaster == "":
		fail("SECKILL_REDIS_MASTER", errors.New("is required with SECKILL_REDIS_SENTINELS: the master name the Sentinels monitor"))
	case len(c.RedisSentinels) == 0 && c.RedisMaster != "":
		fail("SECKILL_REDIS_SENTINELS", fmt.Errorf("is required with SECKILL_REDIS_MASTER=%s: the addresses of the Sentinels", c.RedisMaster))
	case len(c.RedisSentinels) == 0 && c.RedisSentinelPassword != "":
		fail("SECKILL_REDIS_SENTINEL_PASSWORD", errors.New("is set without SECKILL_REDIS_SENTINELS"))
	}
	checkRedisAddrs(c, fail)
	for _, a := range c.RedisSentinels {
		if _, _, err := net.SplitHostPort(a); err != nil {
			fail("SECKILL_REDIS_SENTINELS", fmt.Errorf("%q is not host:port, such as 10.0.0.5:26379", a))
		}
	}
	if err := checkListenAddr(c.Addr); err != nil {
		fail("SECKILL_ADDR", err)
	}
	for _, p := range c.Peers {
		if u, err := url.Parse(p); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fail("SECKILL_PEERS", fmt.Errorf("%q is not a base URL such as http://10.0.0.2:8081", p))
		}
	}
	if c.SoldOutLease*2 > c.RequestTimeout && c.RequestTimeout > 0 {
		fail("SECKILL_SOLD_OUT_LEASE", fmt.Errorf("%s must be at most half of SECKILL_REQUEST_TIMEOUT (%s): a reset waits out the lease within its request", c.SoldOutLease, c.RequestTimeout))
	}
	if c.PaymentTimeout > 0 && c.PaymentTimeout < time.Second {
		fail("SECKILL_PAYMENT_TIMEOUT", errors.New("must be 0 (never) or at least 1s"))
	}
	if c.ReconcileInterval > 0 && c.ReconcileInterval < 100*time.Millisecond {
		fail("SECKILL_RECONCILE_INTERVAL", errors.New("must be 0 (off) or at least 100ms"))
	}
	tokenVar := "SECKILL_ADMIN_TOKEN"
	if c.AdminToken == "" && c.AdminTokenFile != "" {
		tokenVar = "SECKILL_ADMIN_TOKEN_FILE"
		var err error
		if c.AdminToken, err = ReadTokenFile(c.AdminTokenFile); err != nil {
			fail(tokenVar, err)
		} else if c.AdminToken == "" {
			fail(tokenVar, fmt.Errorf("%s is empty", c.AdminTokenFile))
		}
	}
	if c.AdminToken != "" {
		if err := CheckAdminToken(c.AdminToken); err != nil {
			fail(tokenVar, err)
		}
	}
	if c.RoomKeys == "" && c.RoomKeysFile != "" {
		var err error
		if c.RoomKeys, err = ReadTokenFile(c.RoomKeysFile); err != nil {
			fail("SECKILL_ROOM_KEYS_FILE", err)
		}
	}
	return c, errors.Join(errs...)
}

// UsesRedis reports whether Redis is configured, as one server, a Cluster
// or a Sentinel group.
func (c Config) UsesRedis() bool { return len(c.RedisAddrs) > 0 || len(c.RedisSentinels) > 0 }

// maxTokenFile bounds what ReadTokenFile reads: a token is a line.
const maxTokenFile = 4096

// ReadTokenFile reads an admin token from path, trimmed of surrounding
// white space. It reads only a regular file (a FIFO or a device such as
// /dev/zero would block or never end) of at most 4 KiB.
func ReadTokenFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("%s is larger than %d bytes: not a token", path, maxTokenFile)
	}
	return strings.TrimSpace(string(b)), nil
}

// CheckAdminToken says what is wrong with an admin token: fewer than 8
// characters, or a space or control character inside (it travels in an
// Authorization header).
func CheckAdminToken(tok string) error {
	if len(tok) < 8 {
		return errors.New("the admin token must be at least 8 characters")
	}
	for _, r := range tok {
		if r <= ' ' || r == 0x7f {
			return errors.New("the admin token must not contain spaces, line breaks or control characters")
		}
	}
	return nil
}

// checkListenAddr accepts what net.Listen("tcp", addr) takes for a server:
// host:port or :port, the port a number (0 picks a free one).
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port or :port: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	return nil
}

// LogValue lists every setting, secrets masked, so the effective config can
// be logged at start.
func (c Config) LogValue() slog.Value {
	var attrs []slog.Attr
	for _, s := range c.settings() {
		key := strings.ToLower(strings.TrimPrefix(s.name, "SECKILL_"))
		attrs = append(attrs, slog.Any(key, s.show()))
	}
	return slog.GroupValue(attrs...)
}

// setting is one variable bound to its field.
type setting struct {
	name, def, help string
	alias           string                 // a former name, still read when name is not set
	parse           func(raw string) error // stores into the field
	show            func() any             // the field as logged
}

// formerly lets s also be set under its former name, old.
func formerly(old string, s setting) setting {
	s.alias = old
	return s
}

// Aliases returns the former names Load still reads, each with the
// variable that replaced it.
func Aliases() map[string]string {
	out := map[string]string{}
	for _, s := range new(Config).settings() {
		if s.alias != "" {
			out[s.alias] = s.name
		}
	}
	return out
}

func text(f *string, name, def, help string) setting {
	return setting{name: name, def: def, help: help,
		parse: func(raw string) error { *f = raw; return nil },
		show:  func() any { return *f }}
}

func secret(f *string, name, help string) setting {
	s := text(f, name, "", help)
	s.show = func() any {
		if *f == "" {
			return ""
		}
		return "***"
	}
	return s
}

func dsn(f *string, name, def, help string) setting {
	s := text(f, name, def, help)
	s.show = func() any { return maskDSN(*f) }
	return s
}

func list(f *[]string, name, def, help string) setting {
	return setting{name: name, def: def, help: help,
		parse: func(raw string) error {
			*f = SplitList(raw)
			return nil
		},
		show: func() any { return *f }}
}

func duration(f *time.Duration, name, def string, lo, hi time.Duration, help string) setting {
	return setting{name: name, def: def, help: help,
		parse: func(raw string) error {
			d, err := time.ParseDuration(raw)
			if err != nil {
				return fmt.Errorf("%q is not a duration such as 250ms or 5s", raw)
			}
			*f = d
			if d < lo || d > hi {
				return fmt.Errorf("%s is out of range [%s, %s]", d, lo, hi)
			}
			return nil
		},
		show: func() any { return f.String() }}
}

func integer(f *int, name, def string, lo, hi int, help string) setting {
	return setting{name: name, def: def, help: help,
		parse: func(raw string) error {
			n, err := strconv.Atoi(raw)
			if err != nil {
				return fmt.Errorf("%q is not a whole number", raw)
			}
			*f = n
			if n < lo || n > hi {
				return fmt.Errorf("%d is out of range [%d, %d]", n, lo, hi)
			}
			return nil
		},
		show: func() any { return *f }}
}

func prefixes(f *[]netip.Prefix, name, def, help string) setting {
	return setting{name: name, def: def, help: help,
		parse: func(raw string) error {
			*f = nil
			for _, item := range SplitList(raw) {
				p, err := netip.ParsePrefix(item)
				if err != nil {
					a, aerr := netip.ParseAddr(item)
					if aerr != nil {
						return fmt.Errorf("%q is neither an IP address nor a CIDR prefix", item)
					}
					p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
				}
				*f = append(*f, p.Masked())
			}
			return nil
		},
		show: func() any { return fmt.Sprint(*f) }}
}

func boolean(f *bool, name, def, help string) setting {
	return setting{name: name, def: def, help: help,
		parse: func(raw string) error {
			b, err := strconv.ParseBool(raw)
			if err != nil {
				return fmt.Errorf("%q is not true or false", raw)
			}
			*f = b
			return nil
		},
		show: func() any { return *f }}
}

func level(f *slog.Level, name, def, help string) setting {
	return setting{name: name, def: def, help: help,
		parse: func(raw string) error {
			if err := f.UnmarshalText([]byte(raw)); err != nil {
				return fmt.Errorf("%q is not one of debug, info, warn, error", raw)
			}
			return nil
		},
		show: func() any { return f.String() }}
}

// SplitList splits a comma-separated list, as the list settings and the
// commands' list flags are written, dropping blanks around and between.
func SplitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
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
