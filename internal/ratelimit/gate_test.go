package ratelimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/ratelimit"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// gated runs g inside a script of its own that does its work (an INCR of
// work) only when the gate lets it on, and returns the gate's error.
func gated(t *testing.T, c *redis.Client, g ratelimit.Gate, work string) error {
	t.Helper()
	src := g.Src + `
local no = gate(KEYS, ARGV)
if no then return no end
redis.call('INCR', '` + work + `')
return ''`
	keys := g.Keys
	reply, err := redis.NewScript(src).Run(context.Background(), c, keys, g.Args...).Text()
	if err != nil {
		t.Fatal(err)
	}
	if reply == "" {
		return nil
	}
	return g.Refused(reply)
}

// TestGateSharesTheLimitWithAllow: the gate another script runs counts
// against the same limit as Allow (one algorithm, one state): with a
// burst of 2, one Allow and one gated script pass, the next gated script
// is refused with the *Limited Allow would return, and its work is not
// done. With two keys, the refused one is named, and the one before it
// stays counted.
func TestGateSharesTheLimitWithAllow(t *testing.T) {
	addr := testenv.RedisAddr(t)
	ls, _ := fleet(t, addr, 1, 2)
	l := ls[0]
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	work := testenv.Name("rl-work")
	ctx := context.Background()
	if err := l.Allow(ctx, "acct:g"); err != nil {
		t.Fatal(err)
	}
	if err := gated(t, c, l.Gate("acct:g"), work); err != nil {
		t.Fatalf("the burst's second request, gated: %v", err)
	}
	err := gated(t, c, l.Gate("acct:g"), work)
	var lim *ratelimit.Limited
	if !errors.As(err, &lim) || !errors.Is(err, ratelimit.ErrLimited) || lim.Key != "acct:g" || lim.Wait <= 0 || lim.Wait > hour {
		t.Fatalf("past the burst, gated: %v; want a *Limited of acct:g with a wait in (0, one interval]", err)
	}
	if n, _ := c.Get(ctx, work).Int(); n != 1 {
		t.Fatalf("work done %d times, want once (the refused script does none)", n)
	}
	if err := l.Allow(ctx, "acct:g"); !errors.Is(err, ratelimit.ErrLimited) {
		t.Fatalf("Allow after the gate's burst: %v, want limited", err)
	}
	err = gated(t, c, l.Gate("acct:h", "acct:g"), work)
	if !errors.As(err, &lim) || lim.Key != "acct:g" {
		t.Fatalf("two keys, the second over its limit: %v, want acct:g named", err)
	}
	if err := l.Allow(ctx, "acct:h"); err != nil {
		t.Fatalf("acct:h's second request (burst 2): %v; want allowed, its first counted by the gate", err)
	}
	if err := l.Allow(ctx, "acct:h"); !errors.Is(err, ratelimit.ErrLimited) {
		t.Fatalf("acct:h's third request: %v, want limited (the gate counted one)", err)
	}
}

func TestGateRefusedReadsOnlyItsAnswer(t *testing.T) {
	ls, _ := fleet(t, testenv.RedisAddr(t), 1, 1)
	g := ls[0].Gate("acct:x")
	for _, r := range []string{"", "x", "0:5", "2:5", "1:-1", "1:y"} {
		if err := g.Refused(r); err == nil || errors.Is(err, ratelimit.ErrLimited) {
			t.Errorf("Refused(%q) = %v, want an error that is not a limit", r, err)
		}
	}
}
