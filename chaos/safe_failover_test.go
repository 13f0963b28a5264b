package chaos

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestEverySafeStageAcrossSentinelFailover runs each stage that must not
// oversell on a Sentinel group (a primary, a replica, three sentinels; two
// instances configured with SECKILL_REDIS_SENTINELS, so that every Redis
// user of the app, Idempotency-Keys included, is on the group; RedLock keeps
// its own three servers) and SIGKILLs the primary after a third of the
// stock is sold. The buyers keep coming while the sentinels notice, agree
// and promote the replica; the old primary then comes back empty as the
// new replica, and the crowd buys until it is told sold-out.
//
// Every buy carries an Idempotency-Key. The promises:
//   - 0 oversold, and MySQL conserves its stock;
//   - every 201 (and every 202 of redis-stream, at durability replica)
//     ends as a confirmed order, and no buyer told a definite no has one;
//   - during the switch (a buyer every 250 ms) a buyer hears 503, or is
//     sold to once the promotion came: no 500, no hang, no sold-out while
//     units remain; the first buyer after the kill hears 503;
//   - after it the stage sells again; no buy is sold to after another was
//     told sold-out, and once one is, MySQL's stock is 0.
//
// The short form (CI) runs redis-atomic, whose stock lives in Redis.
func TestEverySafeStageAcrossSentinelFailover(t *testing.T) {
	var stages []string
	for _, s := range inventory.Stages {
		if !inventory.Oversells(s, 2) && (full() || s == inventory.StageRedisAtomic) {
			stages = append(stages, s)
		}
	}
	for _, stage := range stages {
		t.Run(stage, func(t *testing.T) { failoverMidBurst(t, stage) })
	}
}

func failoverMidBurst(t *testing.T, stage string) {
	o := rigOptions{}
	if stage == inventory.StageRedLock {
		o.redlock = 3
	}
	r := newRig(t, o)
	r.buyKeys = true
	g := testenv.StartSentinelGroup(t)
	env := map[string]string{"SECKILL_STAGE": stage, "SECKILL_REDIS_ADDR": "",
		"SECKILL_REDIS_SENTINELS": strings.Join(g.SentinelAddrs(), ","), "SECKILL_REDIS_MASTER": g.Master}
	label := stage
	if inventory.Queues(stage) {
		env["SECKILL_STREAM_DURABILITY"] = "replica"
		env["SECKILL_STREAM_REPLICA_WAIT"] = "1s"
		env["SECKILL_STREAM_CLAIM_IDLE"] = "1s"
		label += ", replica"
	}
	a, b := r.start("a", env), r.start("b", env)
	fleet := []*instance{a, b}
	stock := pick(60, 90)
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Stage: label, Fault: "every safe stage on Sentinel (two instances, Idempotency-Keys): primary SIGKILLed after a third of the stock was sold, a buyer every 250 ms during the switch, replica promoted, old primary back as its replica, the crowd buys until sold-out (the 201 column counts 202s too)"}
	r.record(f)
	fail := violations(t, f)
	ctx := t.Context()

	start := time.Now()
	first := r.streamBurst(start, fleet, stock/3, 4, "sf1")
	for _, b := range first {
		if !b.sold() {
			t.Fatalf("buy %s before the kill: %d %s, want an order", b.user, b.status, b.problem)
		}
	}
	w := window{from: time.Since(start)}
	g.Primary.Kill()
	// A buyer every 250 ms until the group is whole again: the sentinels
	// wait SentinelDownAfter before they even call the primary down, then
	// agree, elect and promote.
	var during []streamBuy
	switched, duringDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(duringDone)
		for i := 0; ; i++ {
			select {
			case <-switched:
				return
			case <-time.After(250 * time.Millisecond):
			}
			during = append(during, r.streamBurst(start, fleet, 1, 1, fmt.Sprintf("sw-%d", i))...)
		}
	}()
	g.WaitFailover()
	g.Rejoin()
	close(switched)
	<-duringDone
	w.to = time.Since(start)
	if len(during) == 0 || during[0].status != http.StatusServiceUnavailable {
		fail("the first buy after the kill was not answered 503: %+v", during)
	}
	for _, b := range during {
		if !b.sold() && b.status != http.StatusServiceUnavailable {
			fail("buy %s during the switch: %d %q, want 503 or an order", b.user, b.status, b.problem)
		}
	}

	// Served again once the app's clients have found the new primary.
	var after []streamBuy
	if !testkit.Poll(30*time.Second, func() bool {
		after = append(after, r.streamBurst(start, fleet, 1, 1, fmt.Sprintf("sf2-%d", len(after)))...)
		return after[len(after)-1].sold()
	}) {
		last := after[len(after)-1]
		t.Fatalf("no buy was sold to after the failover: last answer %d %s", last.status, last.problem)
	}
	// The crowd buys until the first sold-out.
	soldOut := false
	for round := 0; !soldOut && round < 10; round++ {
		for _, b := range r.streamBurst(start, fleet, stock/3, 4, fmt.Sprintf("sf3-%d", round)) {
			after = append(after, b)
			soldOut = soldOut || b.problem == "sold-out"
		}
	}
	if !soldOut {
		fail("10 rounds after the failover and nobody was told sold-out")
	}
	buys := append(append(first, during...), after...)
	streamFigures(f, buys, w)

	if inventory.Queues(stage) {
		awaitQueueDrained(ctx, t, g.Primary.Client())
	}
	rows := r.orderRows(ctx)
	sold := 0
	for _, b := range buys {
		switch {
		case b.sold():
			sold++
			if row, ok := rows[b.orderNo]; !ok || row.status != "confirmed" {
				f.Lost++
				fail("buy %s was answered %d with order %s, which MySQL does not hold confirmed", b.user, b.status, b.orderNo)
			}
		case b.status >= 400 && b.status < 500, b.problem == "unavailable":
			for no, row := range rows {
				if row.user == b.user {
					f.Phantom++
					fail("order %s of %s, whose buy was refused (%d %s), has a row", no, b.user, b.status, b.problem)
				}
			}
		}
	}
	initial, dbStock, live := r.conserved(ctx)
	f.Oversold = max(0, live-initial)
	f.Conserved = initial == stock && dbStock+live == stock
	if !f.Conserved || f.Oversold > 0 {
		fail("MySQL: initial %d, stock %d, live units %d; want %d conserved", initial, dbStock, live, stock)
	}
	if soldOut && dbStock != 0 {
		fail("a buyer was told sold-out and MySQL still holds %d units", dbStock)
	}
	// Nobody hears sold-out while a unit remains: no sale starts after a
	// sold-out answer has ended.
	for _, no := range buys {
		if no.problem != "sold-out" {
			continue
		}
		for _, yes := range buys {
			if yes.sold() && yes.start > no.end {
				fail("buy %s was told sold-out at %v, and %s, sent at %v, was sold to", no.user, no.end, yes.user, yes.start)
				break
			}
		}
	}
	t.Logf("%s: %d sold of %d, %d lost; answers %v; switch from %v to %v, sold again at %v, done at %v", label, sold, stock, f.Lost, f.Refused, w.from, w.to, after[0].end, time.Since(start))
}
