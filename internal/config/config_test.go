package config

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	if c.Addr != ":8081" || c.Stage != "redis-lock" || !c.Fencing || c.LockTTL != 5*time.Second || c.IdempotencyTTL != 24*time.Hour || c.LockFair {
		t.Fatalf("unexpected defaults: %+v", c)
	}
	if c.Instance == "" {
		t.Fatal("instance name must default to the host name")
	}
}

func TestLoadParsesValues(t *testing.T) {
	c, err := Load(env(map[string]string{
		"SECKILL_STAGE":                  "local-mutex",
		"SECKILL_REDIS_ADDR":             "a:1, b:2 ,c:3",
		"SECKILL_CRITICAL_SECTION_DELAY": "3ms",
		"SECKILL_FENCING":                "false",
		"SECKILL_INSTANCE":               "i-1",
		"SECKILL_LOCK_FAIR":              "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Stage != "local-mutex" || len(c.RedisAddrs) != 3 || c.RedisAddrs[1] != "b:2" || c.CriticalSectionDelay != 3*time.Millisecond || c.Fencing || c.Instance != "i-1" || !c.LockFair {
		t.Fatalf("unexpected config: %+v", c)
	}
}

func TestLoadNamesEveryBadVariable(t *testing.T) {
	_, err := Load(env(map[string]string{
		"SECKILL_STAGE":              "optimistic",
		"SECKILL_LOCK_TTL":           "five seconds",
		"SECKILL_FENCING":            "maybe",
		"SECKILL_LOG_LEVEL":          "loud",
		"SECKILL_BURST_MAX":          "0",
		"SECKILL_ADMIN_TOKEN":        "short",
		"SECKILL_RECONCILE_INTERVAL": "1ms",
	}))
	if err == nil {
		t.Fatal("want an error")
	}
	_, err2 := Load(env(map[string]string{"SECKILL_LOCK_WAIT": "5s", "SECKILL_REQUEST_TIMEOUT": "5s"}))
	if err2 == nil || !strings.Contains(err2.Error(), "SECKILL_LOCK_WAIT") {
		t.Errorf("a lock wait as long as the request timeout must be refused: %v", err2)
	}
	if err == nil {
		t.Fatal("want an error")
	}
	for _, name := range []string{"SECKILL_STAGE", "SECKILL_LOCK_TTL", "SECKILL_FENCING", "SECKILL_LOG_LEVEL", "SECKILL_BURST_MAX", "SECKILL_ADMIN_TOKEN", "SECKILL_RECONCILE_INTERVAL"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

func TestLogValueMasksSecrets(t *testing.T) {
	c, err := Load(env(map[string]string{
		"SECKILL_ADMIN_TOKEN":    "supersecret-token",
		"SECKILL_MYSQL_DSN":      "root:hunter2@tcp(db:3306)/seckill",
		"SECKILL_REDIS_PASSWORD": "redispw",
	}))
	if err != nil {
		t.Fatal(err)
	}
	s := c.LogValue().String()
	for _, secret := range []string{"supersecret-token", "hunter2", "redispw"} {
		if strings.Contains(s, secret) {
			t.Errorf("logged config leaks %q: %s", secret, s)
		}
	}
	if !strings.Contains(s, "root:***@tcp(db:3306)/seckill") {
		t.Errorf("DSN should stay readable with the password masked: %s", s)
	}
}

func TestEnvNamesAreUniqueAndPrefixed(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range EnvNames() {
		if !strings.HasPrefix(n, "SECKILL_") || seen[n] {
			t.Errorf("bad or duplicate name %q", n)
		}
		seen[n] = true
	}
}

// TestLogValueShowsEverySetting: the effective configuration logged at
// start lists every variable Load reads.
func TestLogValueShowsEverySetting(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	logged := c.LogValue().String()
	for _, name := range EnvNames() {
		key := strings.ToLower(strings.TrimPrefix(name, "SECKILL_")) + "="
		if !strings.Contains(logged, key) {
			t.Errorf("the logged config leaves out %s (%s): %s", name, key, logged)
		}
	}
}

// TestAdminTokenFromFile: SECKILL_ADMIN_TOKEN_FILE supplies the token when
// SECKILL_ADMIN_TOKEN is empty; the variable wins when both are set; and a
// missing, empty or short file fails with the variable's name.
func TestAdminTokenFromFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "from-the-file-123\n")
	c, err := Load(env(map[string]string{"SECKILL_ADMIN_TOKEN_FILE": good}))
	if err != nil || c.AdminToken != "from-the-file-123" {
		t.Fatalf("token from file: %q, %v", c.AdminToken, err)
	}
	c, err = Load(env(map[string]string{"SECKILL_ADMIN_TOKEN_FILE": good, "SECKILL_ADMIN_TOKEN": "from-the-variable"}))
	if err != nil || c.AdminToken != "from-the-variable" {
		t.Fatalf("variable and file: %q, %v; want the variable", c.AdminToken, err)
	}
	big := write("big", strings.Repeat("x", 5000))
	for _, path := range []string{dir + "/missing", write("empty", " \n"), write("short", "abc\n"), write("two-lines", "first-line-1\nsecond-line-2\n"), big, dir, "/dev/zero"} {
		_, err := Load(env(map[string]string{"SECKILL_ADMIN_TOKEN_FILE": path}))
		if err == nil || !strings.Contains(err.Error(), "SECKILL_ADMIN_TOKEN_FILE") {
			t.Errorf("token file %s: %v, want an error naming SECKILL_ADMIN_TOKEN_FILE", path, err)
		}
	}
}

// TestAdminTokenFileThatNeverEnds: a FIFO nobody writes to is refused at
// once instead of blocking start-up (os.ReadFile would wait for a writer
// forever), and so is a device that never ends.
func TestAdminTokenFileThatNeverEnds(t *testing.T) {
	fifo := t.TempDir() + "/fifo"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Load(env(map[string]string{"SECKILL_ADMIN_TOKEN_FILE": fifo}))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("a FIFO as the token file: %v, want 'not a regular file'", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("config.Load is still reading a FIFO after 30 s")
	}
}

func TestAdminTokenMustBeOneWord(t *testing.T) {
	for _, tok := range []string{"has a space inside", "tab\tinside-it", "nul\x00inside-it"} {
		if _, err := Load(env(map[string]string{"SECKILL_ADMIN_TOKEN": tok})); err == nil || !strings.Contains(err.Error(), "SECKILL_ADMIN_TOKEN") {
			t.Errorf("token %q: %v, want an error naming SECKILL_ADMIN_TOKEN", tok, err)
		}
	}
	if _, err := Load(env(map[string]string{"SECKILL_ADMIN_TOKEN": "  padded-token-ok  "})); err != nil {
		t.Errorf("white space around a token is trimmed: %v", err)
	}
}

// TestFormerNamesStillSetTheirVariable: SECKILL_MODE, the former name of
// SECKILL_STAGE, still sets it; both set alike is fine; both set apart
// fails naming both, rather than one silently winning.
func TestFormerNamesStillSetTheirVariable(t *testing.T) {
	if got := Aliases()["SECKILL_MODE"]; got != "SECKILL_STAGE" {
		t.Fatalf("Aliases()[SECKILL_MODE] = %q, want SECKILL_STAGE", got)
	}
	c, err := Load(env(map[string]string{"SECKILL_MODE": "db-atomic"}))
	if err != nil || c.Stage != "db-atomic" {
		t.Fatalf("SECKILL_MODE=db-atomic: stage %q, %v", c.Stage, err)
	}
	c, err = Load(env(map[string]string{"SECKILL_MODE": "db-atomic", "SECKILL_STAGE": "db-atomic"}))
	if err != nil || c.Stage != "db-atomic" {
		t.Fatalf("both alike: stage %q, %v", c.Stage, err)
	}
	_, err = Load(env(map[string]string{"SECKILL_MODE": "unlocked", "SECKILL_STAGE": "db-atomic"}))
	if err == nil || !strings.Contains(err.Error(), "SECKILL_STAGE") || !strings.Contains(err.Error(), "SECKILL_MODE") {
		t.Fatalf("both apart: %v; want an error naming both", err)
	}
	_, err = Load(env(map[string]string{"SECKILL_MODE": "optimistic"}))
	if err == nil || !strings.Contains(err.Error(), "SECKILL_STAGE") {
		t.Fatalf("a bad stage under the former name: %v; want the error to name SECKILL_STAGE", err)
	}
	for _, n := range EnvNames() {
		if _, former := Aliases()[n]; former {
			t.Errorf("EnvNames lists the former name %s: docs and compose must use the new one", n)
		}
	}
}

// A Sentinel group is named by its Sentinels and the master name together,
// instead of SECKILL_REDIS_ADDR; each half alone, or both ways at once,
// is refused with the variable to fix.
func TestLoadRedisSentinels(t *testing.T) {
	c, err := Load(env(map[string]string{"SECKILL_REDIS_SENTINELS": "s1:26379, s2:26379,s3:26379", "SECKILL_REDIS_MASTER": "seckill", "SECKILL_REDIS_SENTINEL_PASSWORD": "sentinelpw"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.RedisSentinels) != 3 || c.RedisSentinels[2] != "s3:26379" || c.RedisMaster != "seckill" || !c.UsesRedis() {
		t.Fatalf("unexpected config: %+v", c)
	}
	if s := c.LogValue().String(); strings.Contains(s, "sentinelpw") {
		t.Errorf("the sentinel password is logged: %s", s)
	}
	if c, err := Load(env(nil)); err != nil || c.UsesRedis() {
		t.Errorf("no Redis by default: %v, %v", c.UsesRedis(), err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SECKILL_REDIS_SENTINELS": "s1:26379"}, "SECKILL_REDIS_MASTER"},
		{map[string]string{"SECKILL_REDIS_MASTER": "seckill"}, "SECKILL_REDIS_SENTINELS"},
		{map[string]string{"SECKILL_REDIS_SENTINELS": "s1:26379", "SECKILL_REDIS_MASTER": "m", "SECKILL_REDIS_ADDR": "r:6379"}, "not both"},
		{map[string]string{"SECKILL_REDIS_SENTINELS": "s1", "SECKILL_REDIS_MASTER": "m"}, "not host:port"},
		{map[string]string{"SECKILL_REDIS_SENTINEL_PASSWORD": "pw"}, "SECKILL_REDIS_SENTINEL_PASSWORD"},
	} {
		if _, err := Load(env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %q", tc.env, err, tc.want)
		}
	}
}

// TestRateLimitSettings: the limit is off by default; an interval, a
// burst, what it counts and the trusted proxies (IPs or prefixes) are
// read; a wrong "by" or a proxy that is not an address fails naming its
// variable.
func TestRateLimitSettings(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil || c.RateInterval != 0 || c.RateBurst != 5 || len(c.RateLimitBy) != 1 || c.RateLimitBy[0] != "account" || len(c.TrustedProxies) != 0 {
		t.Fatalf("defaults: %v %v %v %v (%v)", c.RateInterval, c.RateBurst, c.RateLimitBy, c.TrustedProxies, err)
	}
	c, err = Load(env(map[string]string{"SECKILL_RATE_INTERVAL": "50ms", "SECKILL_RATE_BURST": "2", "SECKILL_RATE_LIMIT_BY": "account,address", "SECKILL_TRUSTED_PROXIES": "10.0.0.0/8, 127.0.0.1, ::1"}))
	if err != nil || c.RateInterval != 50*time.Millisecond || c.RateBurst != 2 || len(c.RateLimitBy) != 2 || len(c.TrustedProxies) != 3 ||
		c.TrustedProxies[0].String() != "10.0.0.0/8" || c.TrustedProxies[1].String() != "127.0.0.1/32" || c.TrustedProxies[2].String() != "::1/128" {
		t.Fatalf("parsed: %v %v %v %v (%v)", c.RateInterval, c.RateBurst, c.RateLimitBy, c.TrustedProxies, err)
	}
	for name, value := range map[string]string{"SECKILL_RATE_LIMIT_BY": "ip", "SECKILL_TRUSTED_PROXIES": "nginx", "SECKILL_RATE_BURST": "0"} {
		if _, err := Load(env(map[string]string{name: value})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v; want an error naming it", name, value, err)
		}
	}
}

// The stream's durability is one of three levels; replica needs the
// script's own connection, which a Cluster client does not give, and a
// wait shorter than the request.
func TestLoadStreamDurability(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil || c.StreamDurability != "none" || c.StreamReplicaWait != 100*time.Millisecond {
		t.Fatalf("defaults: %q %s %v", c.StreamDurability, c.StreamReplicaWait, err)
	}
	c, err = Load(env(map[string]string{"SECKILL_STREAM_DURABILITY": "replica", "SECKILL_STREAM_REPLICA_WAIT": "250ms", "SECKILL_REDIS_ADDR": "r:6379"}))
	if err != nil || c.StreamDurability != "replica" || c.StreamReplicaWait != 250*time.Millisecond {
		t.Fatalf("%q %s %v", c.StreamDurability, c.StreamReplicaWait, err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SECKILL_STREAM_DURABILITY": "disk"}, "SECKILL_STREAM_DURABILITY"},
		{map[string]string{"SECKILL_STREAM_DURABILITY": "replica", "SECKILL_REDIS_ADDR": "a:1,b:2,c:3"}, "not a Cluster"},
		{map[string]string{"SECKILL_STREAM_REPLICA_WAIT": "5s", "SECKILL_REQUEST_TIMEOUT": "5s"}, "SECKILL_STREAM_REPLICA_WAIT"},
	} {
		if _, err := Load(env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %q", tc.env, err, tc.want)
		}
	}
}

// TestLoadRedisUnixSockets: SECKILL_REDIS_ADDR and SECKILL_REDLOCK_ADDRS
// take unix:/path for a Redis on the same machine, which RedisNetAddr
// turns into the network and path to dial; a relative path, or a socket
// among a Cluster's nodes, fails naming its variable.
func TestLoadRedisUnixSockets(t *testing.T) {
	c, err := Load(env(map[string]string{"SECKILL_REDIS_ADDR": "unix:/run/redis/redis.sock", "SECKILL_REDLOCK_ADDRS": "unix:/tmp/r1.sock,10.0.0.2:6379"}))
	if err != nil {
		t.Fatal(err)
	}
	if n, a := RedisNetAddr(c.RedisAddrs[0]); n != "unix" || a != "/run/redis/redis.sock" {
		t.Errorf("SECKILL_REDIS_ADDR unix:/run/redis/redis.sock dials %s %s", n, a)
	}
	if n, a := RedisNetAddr(c.RedlockAddrs[1]); n != "tcp" || a != "10.0.0.2:6379" {
		t.Errorf("10.0.0.2:6379 dials %s %s", n, a)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SECKILL_REDIS_ADDR": "unix:redis.sock"}, "SECKILL_REDIS_ADDR"},
		{map[string]string{"SECKILL_REDIS_ADDR": "unix:/tmp/a.sock,b:6379"}, "Cluster"},
		{map[string]string{"SECKILL_REDLOCK_ADDRS": "a:6379,unix:r.sock"}, "SECKILL_REDLOCK_ADDRS"},
	} {
		if _, err := Load(env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %q", tc.env, err, tc.want)
		}
	}
}
