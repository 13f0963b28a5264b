package testenv

import (
	"context"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestRejoiningPrimaryIsNotPromotedBeforeItSynced: the primary a failover
// replaced comes back empty. While it syncs, the promoted primary stops
// answering (paused: as a starved machine or a long fork can make it look
// to the Sentinels), and they try to fail over again. They must not
// promote the empty server, which would throw the data away: they give
// the failover up for want of a good replica, and once the promoted
// primary answers again the rejoined server syncs from it.
func TestRejoiningPrimaryIsNotPromotedBeforeItSynced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel group and fails it over twice; left to the full tier")
	}
	t.Parallel()
	g := StartSentinelGroup(t)
	g.Primary.Kill()
	promoted := g.WaitFailover()

	// Every sentinel's events, from before the pause.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan string, 64)
	for _, s := range g.Sentinels {
		c := g.client(s.Addr)
		defer c.Close()
		sub := c.Subscribe(ctx, "+switch-master", "-failover-abort-no-good-slave")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatalf("subscribe to sentinel %s: %v", s.Addr, err)
		}
		go func() {
			for m := range sub.Channel() {
				events <- m.Channel + " " + m.Payload
			}
		}()
	}

	g.Replica.Pause() // the promoted primary: the rejoined server cannot sync from it
	t.Cleanup(g.Replica.Resume)
	g.rejoinStart()
	// The wait follows the sentinels' view of the failover (flags such
	// as s_down, o_down and failover_in_progress, failover state), not the
	// clock: a machine whose cores are all taken slows them down.
	var e string
	if !testkit.PollProgress(stall, g.failoverState, func() bool {
		select {
		case e = <-events:
			return true
		default:
			return false
		}
	}) {
		t.Fatalf("the sentinels neither failed over nor gave up while the promoted primary was paused, and stood still for %v:\n%s", stall, g.failoverState())
	}
	if !strings.HasPrefix(e, "-failover-abort-no-good-slave") {
		t.Fatalf("while the rejoined server was empty the sentinels said %q; want the failover given up (no good replica)", e)
	}
	g.Replica.Resume()
	g.rejoinEnd()
	for _, s := range g.Sentinels {
		c := g.client(s.Addr)
		addr, err := c.Do(context.Background(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.Master).StringSlice()
		_ = c.Close()
		if err != nil || len(addr) != 2 || addr[0]+":"+addr[1] != promoted {
			t.Fatalf("sentinel %s names %v (%v) the primary; want %s", s.Addr, addr, err, promoted)
		}
	}
}

// TestFailoverStateNamesEachSentinelsView: the report a stalled failover
// wait prints holds every sentinel's view of the master (its flags and
// epoch), whichever protocol the client speaks; under RESP3 it used to
// print only "unexpected type=map" for each.
func TestFailoverStateNamesEachSentinelsView(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel group; left to the full tier")
	}
	t.Parallel()
	g := StartSentinelGroup(t)
	state := g.failoverState()
	for _, s := range g.Sentinels {
		line := ""
		for _, l := range strings.Split(state, "\n") {
			if strings.HasPrefix(l, "sentinel "+s.Addr) {
				line = l
			}
		}
		if !strings.Contains(line, " flags=master") || !strings.Contains(line, " config-epoch=") || !strings.Contains(line, "(<nil>)") {
			t.Errorf("sentinel %s: %q; want its view of the master (flags, epoch) and no error\n%s", s.Addr, line, state)
		}
	}
}
