package main

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// TestScalperAgainstFakeShops runs the scalper scenarios against a fake
// shop that sells as a safe stage does and limits by X-Forwarded-For as
// the instances do: 100 people, so 10 scalpers with 10 accounts each,
// stock 40.
//   - Off: the scalpers, firing from T-0, win more than their share of
//     the people; no target; the shop's own limit is back afterwards.
//   - Limited: the shop is told a per-address limit of burst 1 and an
//     opening draw of 1.5 s, and the item is reset to open at T-0; no
//     scalper address wins more than one unit, the scalpers hear 429,
//     and the shop's limit and draw are back afterwards. The fake holds
//     nobody, so ten scalpers take up to ten of the forty units at T-0:
//     2.5×, NOT MET, yet not surely missed over forty units (a true 1.5×
//     wins that many 7% of the time), so the row passes; on a busy
//     machine they may take fewer and meet the target.
//   - Over twenty units the same ten are surely too many: the row fails,
//     naming the rule; with --scalper-target-verdict=false it passes and
//     says the target is reported only. Here the shop serves the
//     scalpers' first shots before any ordinary buyer (scalpersFirst), so
//     they take ten of the twenty however the machine orders the crowd:
//     on a busy one, ordinary buyers once took all twenty first.
//   - A shop whose limit leaks (every scalper account wins) fails the
//     limit's own rule.
//   - A shop that does not trust the lab's X-Forwarded-For fails the row
//     as a lab error that names the setting to change.
func TestScalperAgainstFakeShops(t *testing.T) {
	t.Parallel()
	args := []string{"--stages", inventory.StageRedisAtomic, "--scalper-people", "100"}
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		url, shop := startFakeShopAs(t, (*fakeShop).sell, true, nil)
		r, err := runAgainst(t, url, append(args, "--scenarios", "scalper")...)
		if err != nil || r.Verdict != results.Pass || r.Scalper == nil || r.Scalper.Gain == nil {
			t.Fatalf("want a pass with a gain, got %v: %s %q", err, r.Verdict, r.Note)
		}
		sp := r.Scalper
		if sp.Limited || sp.Scalpers != 10 || sp.ScalperWon+sp.NormalWon != 40 || *sp.Gain <= 1 || sp.TargetMet != nil || sp.ScalperLimited != 0 {
			t.Errorf("figures %+v; want 10 scalpers, 40 won, a gain above 1, no limit and no target", *sp)
		}
		shop.mu.Lock()
		defer shop.mu.Unlock()
		if shop.limit.On || shop.limitPuts != 2 || !slices.Equal(shop.limit.By, []string{"account"}) || shop.limit.Burst != 5 {
			t.Errorf("the shop's limit after the row: %+v after %d PUTs; want its own (off, burst 5, by account) set back", shop.limit, shop.limitPuts)
		}
	})
	t.Run("limited", func(t *testing.T) {
		t.Parallel()
		url, shop := startFakeShopAs(t, (*fakeShop).sell, true, nil)
		r, err := runAgainst(t, url, append(args, "--scenarios", "scalper-limited")...)
		if err != nil || r.Verdict != results.Pass || r.Scalper == nil || r.Scalper.TargetMet == nil || r.Scalper.MissedP == nil {
			t.Fatalf("want a pass with the target reported, got %v: %s %q", err, r.Verdict, r.Note)
		}
		sp := r.Scalper
		// How many of the ten scalpers' first requests beat the others
		// depends on the machine (a busy one let ordinary buyers take 34
		// of the 40): the target may be met or not, but its verdict must
		// follow the gain, and a miss must not be sure.
		met := *sp.Gain <= *sp.Target
		if !sp.Limited || sp.LimitBurst != 1 || sp.ScalperWon > 10 || sp.LimitAllows != 10 || sp.ScalperLimited == 0 || *sp.TargetMet != met || (!met && *sp.MissedP < results.MissedAt) {
			t.Errorf("figures %+v (gain %.2f, target %.2f); want at most one unit per scalper address, 429s to scalpers, the target's verdict following the gain, and a miss not sure", *sp, *sp.Gain, *sp.Target)
		}
		verdict := "met"
		if !met {
			verdict = "NOT MET"
		}
		if sp.DrawMS != 1500 || sp.OpensAt == nil || !strings.Contains(r.Note, verdict) || !strings.Contains(r.Note, "opening draw of 1500 ms") {
			t.Errorf("draw %v ms, opening %v, note %q; want the 1.5 s draw and its opening reported", sp.DrawMS, sp.OpensAt, r.Note)
		}
		shop.mu.Lock()
		defer shop.mu.Unlock()
		if shop.limit.On || shop.limit.OpeningDrawMS != 0 || !slices.Equal(shop.draws, []float64{1500, 0}) {
			t.Errorf("the shop's limit %+v after draws %v; want the draw set to 1500 for the row and put back to 0", shop.limit, shop.draws)
		}
		if len(shop.openings) != 1 || !shop.openings[0].Equal(*sp.OpensAt) {
			t.Errorf("resets with an opening: %v; want one, at the row's %v", shop.openings, sp.OpensAt)
		}
	})
	t.Run("target as verdict", func(t *testing.T) {
		t.Parallel()
		url, _ := startFakeShopAs(t, scalpersFirst(90, 10), true, nil)
		r, err := runAgainst(t, url, append(args, "--scenarios", "scalper-limited", "--stock", "20")...)
		if !errors.Is(err, errVerdict) || !slices.Equal(r.Broken, []string{verdict.RuleScalpers}) {
			t.Fatalf("want a failed verdict naming %s alone, got %v: %v %q", verdict.RuleScalpers, err, r.Broken, r.Note)
		}
	})
	t.Run("target reported only", func(t *testing.T) {
		t.Parallel()
		url, _ := startFakeShopAs(t, scalpersFirst(90, 10), true, nil)
		r, err := runAgainst(t, url, append(args, "--scenarios", "scalper-limited", "--stock", "20", "--scalper-target-verdict=false")...)
		if err != nil || r.Verdict != results.Pass || !strings.Contains(r.Note, "--scalper-target-verdict") {
			t.Fatalf("want a pass that reports the target only, got %v: %s %q", err, r.Verdict, r.Note)
		}
	})
	t.Run("a limit that leaks", func(t *testing.T) {
		t.Parallel()
		url, _ := startFakeShopAs(t, (*fakeShop).sell, true, func(s *fakeShop) { s.limitLeaks = true })
		r, err := runAgainst(t, url, append(args, "--scenarios", "scalper-limited", "--scalper-target-verdict=false")...)
		if !errors.Is(err, errVerdict) || !slices.Equal(r.Broken, []string{verdict.RuleScalperLimit}) {
			t.Fatalf("want a failed verdict naming %s alone, got %v: %v %q", verdict.RuleScalperLimit, err, r.Broken, r.Note)
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		t.Parallel()
		url, _ := startFakeShopAs(t, (*fakeShop).sell, true, func(s *fakeShop) { s.limit.TrustedProxies = []string{} })
		r, err := runAgainst(t, url, append(args, "--scenarios", "scalper")...)
		if !errors.Is(err, errVerdict) || !slices.Equal(r.Broken, []string{verdict.RuleLabError}) || !strings.Contains(r.Note, "SECKILL_TRUSTED_PROXIES") {
			t.Fatalf("want the row failed as %s, naming SECKILL_TRUSTED_PROXIES; got %v: %v %q", verdict.RuleLabError, err, r.Broken, r.Note)
		}
	})
}

// scalpersFirst is a fake shop's policy that holds the ordinary buyers
// (the first normals of the lab's plan, by their number) until the shop
// has answered scalpers requests of the others, and then sells to all as
// they come; s.mu, held around a policy, guards seen. Under a per-address limit of burst 1, those are the first
// shots of the scalper addresses, one each, so each scalper wins a unit.
func scalpersFirst(normals, scalpers int) func(s *fakeShop, user string) fakeAnswer {
	release := make(chan struct{})
	seen := 0
	return func(s *fakeShop, user string) fakeAnswer {
		n, err := strconv.Atoi(user[strings.LastIndex(user, "-")+1:])
		if err == nil && n < normals && seen < scalpers {
			return fakeAnswer{wait: release}
		}
		a := s.sell(user)
		if err == nil && n >= normals && seen < scalpers {
			if seen++; seen == scalpers {
				close(release)
			}
		}
		return a
	}
}

// TestFairLockTargetFromInfo: a fleet whose every instance says its
// redis-lock is fair (lock_fair in /api/v1/info) holds redis-lock's paced
// row to the atomic stages' first-come target without
// --first-come-target; one that does not, or a run that names
// redis-lock's target itself, keeps what it had.
//
// The fake shop sells in arrival order, but the lab's own scheduling can
// reorder 200 arrivals 2 ms apart on a busy machine (a CI run beside CPU
// hogs scored 0.65, with 605 ms of jitter): a row held to the target then
// fails on the first-come rule alone, which is the target at work too.
func TestFairLockTargetFromInfo(t *testing.T) {
	args := []string{"--scenarios", "paced", "--pace", "2ms", "--paced-buyers", "200", "--stages", inventory.StageRedisLock}
	for _, c := range []struct {
		name  string
		fair  bool
		extra []string
		want  float64 // 0: no target
	}{
		{"fair", true, nil, 0.95},
		{"not fair", false, nil, 0},
		{"fair, target named", true, []string{"--first-come-target", "redis-lock=none"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			url, _ := startFakeShopAs(t, (*fakeShop).sell, true, func(s *fakeShop) { s.lockFair = c.fair })
			r, err := runAgainst(t, url, append(args, c.extra...)...)
			if r.Paced == nil {
				t.Fatalf("no paced result: %v: %s %q", err, r.Verdict, r.Note)
			}
			switch got := r.Paced.Target; {
			case c.want == 0 && got != nil:
				t.Errorf("target %v, want none", *got)
			case c.want != 0 && (got == nil || *got != c.want):
				t.Errorf("target %v, want %v", got, c.want)
			}
			if c.want != 0 && r.Paced.Score != nil && *r.Paced.Score < c.want {
				if !errors.Is(err, errVerdict) || !slices.Equal(r.Broken, []string{verdict.RuleFirstCome}) {
					t.Fatalf("score %.2f below the target %.2f: got %v, broken %v; want the row failed on %s alone", *r.Paced.Score, c.want, err, r.Broken, verdict.RuleFirstCome)
				}
				return
			}
			if err != nil || r.Verdict != results.Pass {
				t.Fatalf("got %v: %s %q", err, r.Verdict, r.Note)
			}
		})
	}
}

// TestBinomialTail checks the scalper verdict's tail against values worked
// by hand: P(X ≥ k) over n draws of chance p.
func TestBinomialTail(t *testing.T) {
	for _, c := range []struct {
		n, k int
		p    float64
		want float64
	}{
		{10, 0, 0.3, 1},
		{10, 11, 0.3, 0},
		{2, 1, 0.5, 0.75},        // 1 - 1/4
		{3, 3, 0.5, 0.125},       // 1/8
		{4, 2, 0.25, 0.26171875}, // 1 - (81 + 108)/256
		{100, 10, 0, 0},
		{100, 10, 1, 1},
	} {
		if got := results.BinomialTail(c.n, c.k, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("P(X ≥ %d | n=%d, p=%v) = %v, want %v", c.k, c.n, c.p, got, c.want)
		}
	}
}
