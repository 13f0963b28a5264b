package lock_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
)

// Fault injection shared by the fault tests (renewal_test.go,
// try_cleanup_test.go, redlock_faults_test.go and others).

// scriptHook steps into the package's scripts on one client: before runs
// before a script is sent and after once its reply is in; each returns the
// error the caller sees. Other commands pass through untouched.
type scriptHook struct {
	before func(ctx context.Context, script string, cmd redis.Cmder) error
	after  func(ctx context.Context, script string, cmd redis.Cmder, err error) error
}

func (h scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := lock.ScriptOf(cmd)
		if name == "" {
			return next(ctx, cmd)
		}
		if h.before != nil {
			if err := h.before(ctx, name, cmd); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return err // go-redis sends the script again with EVAL; act on that
		}
		if h.after != nil {
			if err = h.after(ctx, name, cmd, err); err != nil {
				cmd.SetErr(err)
			}
		}
		return err
	}
}

// scriptTTL is the ttl argument, in ms, of an obtain or refresh script.
func scriptTTL(cmd redis.Cmder) string {
	args := lock.ScriptArgs(cmd)
	switch lock.ScriptOf(cmd) {
	case "obtain":
		return args[1]
	case "refresh": // owner, token, ttl, fence ttl
		return args[2]
	}
	return ""
}

// errReplyLost is what go-redis reports when a reply does not arrive before
// the read deadline: the command may well have run.
var errReplyLost error = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// hookedClient returns a client of addr with h installed, closed when the
// test ends.
func hookedClient(t testing.TB, opts *redis.Options, h redis.Hook) *redis.Client {
	t.Helper()
	if opts.MaxRetries == 0 {
		opts.MaxRetries = -1 // lock.New refuses a client that retries
	}
	rdb := redis.NewClient(opts)
	rdb.AddHook(h)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// slack is how much later than its own deadline a call may return before a
// test calls it a hang: generous, since the machine may be busy; a hang
// (the bug these tests look for) overruns it by far.
const slack = 5 * time.Second

// returnsBy runs f and waits for it until deadline+slack; a call still
// running then fails the test at once instead of hanging it.
func returnsBy[T any](t testing.TB, what string, deadline time.Time, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	bound := time.NewTimer(time.Until(deadline.Add(slack)))
	defer bound.Stop()
	select {
	case v := <-done:
		return v
	case <-bound.C:
		t.Fatalf("%s did not return by its deadline plus %v", what, slack)
		panic("unreachable")
	}
}

// assertTrustNoLonger checks the lease's central promise at this moment: a
// healthy lease's validity deadline is no later than the moment Redis can
// expire the key, so no one else can hold the lock while Err is nil.
func assertTrustNoLonger(t testing.TB, rdb redis.UniversalClient, key string, l *lock.Lease) {
	t.Helper()
	pttl, err := rdb.PTTL(context.Background(), key).Result()
	after := time.Now()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	if l.Err() != nil {
		return // ended: it trusts nothing
	}
	if pttl < 0 {
		t.Fatalf("the key is gone from Redis (PTTL %v) while the lease reports no error", pttl)
	}
	// Redis read its clock before after, so the key expires by after+pttl
	// (plus the millisecond PTTL rounds away).
	if d, expiry := l.Deadline(), after.Add(pttl+time.Millisecond); d.After(expiry) {
		t.Fatalf("the lease trusts itself %v longer than Redis keeps the key (PTTL %v)", d.Sub(expiry), pttl)
	}
}

func describe(err error) string {
	if err == nil {
		return "nil"
	}
	return fmt.Sprintf("%T: %v", err, err)
}
