package lock_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// scriptCall matches the request that runs the package's script name on
// the lock of key.
func scriptCall(name, prefix, key string) func([]byte) bool {
	sha, lk := []byte(lock.ScriptSHA(name)), []byte(lockKey(prefix, key))
	return func(req []byte) bool { return bytes.Contains(req, sha) && bytes.Contains(req, lk) }
}

// faultyClient is a client of the test Redis whose connections d can
// break, built with opts (Addr and Dialer are set here).
func faultyClient(t *testing.T, d *testkit.NetFaults, opts redis.Options) *redis.Client {
	t.Helper()
	opts.Addr = testRedis(t).Options().Addr
	opts.Dialer = d.Dial
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// record is the lock's value in Redis, "" when absent.
func record(t *testing.T, rdb redis.UniversalClient, prefix, key string) string {
	t.Helper()
	v, err := rdb.Get(context.Background(), lockKey(prefix, key)).Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("read lock %q: %v", key, err)
	}
	return v
}

// A script whose reply is lost after Redis ran it (the connection broke)
// has an unknown outcome. If the client sends it again, the second run
// answers about the first one's work: an obtain finds its own grant
// ("held"), a release finds nothing left ("lost"), a re-entry adds a second
// hold. Each answer is wrong, and the lock is left held by nobody, or a
// clean release is reported lost. So New refuses a client that retries,
// and with retries off the package sees the unknown outcome and acts on it.
func TestLostReplyIsNotAnsweredByARetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := &testkit.NetFaults{}
	// go-redis's defaults: MaxRetries 3.
	if _, err := lock.New(faultyClient(t, d, redis.Options{ContextTimeoutEnabled: true}), lock.Options{}); err == nil || !strings.Contains(err.Error(), "MaxRetries: -1") {
		t.Fatalf("New accepted a client that retries: %v", err)
	}
	rdb := faultyClient(t, d, *lock.ClientOptions(&redis.Options{}))
	var lost atomic.Int32
	c, prefix := newClient(t, rdb, lock.Options{Hooks: lock.Hooks{Lost: func(string, error) { lost.Add(1) }}})
	// Load the scripts, so that each call below is one EVALSHA.
	mustRelease(t, mustObtain(t, c, ctx, "warm-up", time.Second, lock.ObtainOptions{}))

	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		key := "obtain-" + wait.String()
		d.Drop(1, scriptCall("obtain", prefix, key))
		l, err := c.Obtain(ctx, key, 10*time.Second, lock.ObtainOptions{Wait: wait})
		if d.Dropped() == 0 {
			t.Fatal("no reply was dropped")
		}
		if err == nil {
			mustRelease(t, l)
		} else if v := record(t, rdb, prefix, key); v != "" {
			t.Errorf("Wait %v: Obtain failed (%v), yet the lock is held by an owner nobody knows: %q", wait, err, v)
		}
	}

	l := mustObtain(t, c, ctx, "release", 10*time.Second, lock.ObtainOptions{})
	before := d.Dropped()
	d.Drop(1, scriptCall("release", prefix, "release"))
	err := l.Release(ctx)
	if d.Dropped() == before {
		t.Fatal("no reply was dropped")
	}
	if errors.Is(err, lock.ErrLockLost) || lost.Load() != 0 {
		t.Errorf("a release nobody overtook was reported lost: %v (Lost hook fired %d times)", err, lost.Load())
	}
	if v := record(t, rdb, prefix, "release"); v != "" {
		t.Errorf("the release ran, yet the lock is held: %q", v)
	}

	o := lock.ObtainOptions{Owner: "job-1"}
	outer := mustObtain(t, c, ctx, "reentrant", 10*time.Second, o)
	before = d.Dropped()
	d.Drop(1, scriptCall("obtain", prefix, "reentrant"))
	inner, err := c.Obtain(ctx, "reentrant", 10*time.Second, o)
	if d.Dropped() == before {
		t.Fatal("no reply was dropped")
	}
	if err == nil {
		// The caller now holds two leases: Redis must count two holds.
		if v := record(t, rdb, prefix, "reentrant"); !strings.HasSuffix(strings.TrimSuffix(v, "w"), "|2") {
			t.Errorf("the owner holds 2 leases, but Redis counts %q", v)
		}
		_ = inner.Release(ctx)
	}
	_ = outer.Release(ctx)
}

// Every kind of go-redis client is refused while its retries are on, and
// accepted once they are off; so is a RedLock instance.
func TestNewRefusesClientsThatRetry(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:1" // nothing is dialled
	for _, tc := range []struct {
		name  string
		rdb   redis.UniversalClient
		retry bool
	}{
		{"client default", redis.NewClient(&redis.Options{Addr: addr}), true},
		{"client MaxRetries 1", redis.NewClient(&redis.Options{Addr: addr, MaxRetries: 1}), true},
		{"client off", redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}), false},
		{"client ClientOptions", redis.NewClient(lock.ClientOptions(&redis.Options{Addr: addr})), false},
		{"cluster default", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}), true},
		{"cluster node retries", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRedirects: -1, MaxRetries: 2}), true},
		{"cluster off", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRedirects: -1}), false},
		{"ring default", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}}), true},
		{"ring off", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, MaxRetries: -1}), false},
		{"failover default", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}}), true},
		{"failover off", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}, MaxRetries: -1}), false},
		{"failover FailoverOptions", redis.NewFailoverClient(lock.FailoverOptions(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}})), false},
		{"universal sentinel off", redis.NewUniversalClient(&redis.UniversalOptions{MasterName: "m", Addrs: []string{addr}, MaxRetries: -1, MaxRedirects: -1}), false},
		{"universal cluster off", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr, addr}, MaxRetries: -1, MaxRedirects: -1}), false},
	} {
		t.Cleanup(func() { _ = tc.rdb.Close() })
		c, err := lock.New(tc.rdb, lock.Options{})
		switch {
		case tc.retry && err == nil:
			t.Errorf("%s: New accepted a client that retries", tc.name)
		case tc.retry && !strings.Contains(err.Error(), "MaxRetries"):
			t.Errorf("%s: the error does not say what to set: %v", tc.name, err)
		case !tc.retry && err != nil:
			t.Errorf("%s: New refused a client without retries: %v", tc.name, err)
		}
		if c != nil {
			_ = c.Close()
		}
		r, err := lock.NewRedLock([]redis.UniversalClient{tc.rdb}, lock.RedLockOptions{})
		if tc.retry != (err != nil) {
			t.Errorf("%s: NewRedLock: %v", tc.name, err)
		}
		if r != nil {
			_ = r.Close()
		}
	}
}
