package chaos

import (
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestPauseHolderPastTTL freezes (SIGSTOP) an instance inside its critical
// section, after it read the stock and before it wrote, and keeps it frozen
// until its lease has run out and another instance has sold; then it thaws
// it (SIGCONT). The frozen holder wakes up believing it is inside the
// critical section; the fencing token at the stock write must refuse it
// (503 lock-lost) so that nothing is sold twice.
func TestPauseHolderPastTTL(t *testing.T) {
	r := newRig(t, rigOptions{})
	ttl := pick(time.Second, 2*time.Second)
	env := map[string]string{"SECKILL_STAGE": "redis-lock", "SECKILL_LOCK_TTL": ttl.String()}
	// a's section is long (the delay sits between its read and its write),
	// so the pause lands inside it, and its request deadline is far, so the
	// answer after the pause is the fence's and not a timeout.
	slow := map[string]string{"SECKILL_STAGE": "redis-lock", "SECKILL_LOCK_TTL": ttl.String(), "SECKILL_CRITICAL_SECTION_DELAY": ttl.String(), "SECKILL_REQUEST_TIMEOUT": "60s"}
	a, b := r.start("a", slow), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "seckill instance SIGSTOPped inside its critical section until its lease ran out and another instance sold, then SIGCONT", Stage: "redis-lock"}
	r.record(f)

	// a alone sells first, one buy at a time, so the lock held when the
	// pause comes is a's, and all of a's earlier buys have their answers.
	start := time.Now()
	ba := r.fire(burstOptions{targets: []*instance{a}, requests: 12, workers: 1, deadline: time.Minute, prefix: "pa", start: start})
	rc := r.redis.Client()
	paused := -1 // the id of a's buy caught by the pause
	for try := 0; try < 5 && paused < 0; try++ {
		if !testkit.Poll(30*time.Second, func() bool { return lockHeld(t.Context(), rc) }) {
			t.Fatal("a never held the lock")
		}
		a.pause()
		// a is frozen: its lock can only vanish by expiring, and no order of
		// its can appear. Its buy in flight is before its write if the lock
		// is still there and that buy has no order row yet.
		answered := ba.completed.Load()
		if lockHeld(t.Context(), rc) && r.orders("pa-%") == ba.count(func(c call) bool { return c.Outcome == outOK }) {
			paused = int(answered)
			break
		}
		a.resume()
	}
	if paused < 0 {
		t.Fatal("could not pause a between its read and its write in 5 tries")
	}
	w := window{from: time.Since(start)}
	bb := r.fire(burstOptions{targets: []*instance{b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "pb", start: time.Now()})
	// b can sell only once a's lease has expired in Redis.
	if !testkit.Poll(time.Minute, func() bool { return bb.count(func(c call) bool { return c.Outcome == outOK }) > 0 }) {
		t.Error("b sold nothing while a was paused")
	}
	a.resume()
	w.to = time.Since(start)
	callsA, err := ba.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	callsB, err := bb.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// a's buyers wait out the pause; they still get an answer.
	r.verify(f, append(callsA, callsB...), stock, w, expect{slugs: faultSlugs}, b)
	lost := 0
	for _, c := range callsA {
		if c.Problem == "lock-lost" {
			lost++
		}
		if c.ID == paused && c.Problem != "lock-lost" {
			t.Errorf("a's buy %d, paused between its read and its write past its lease, got %d %q (%s), want 503 lock-lost from the fence", c.ID, c.Status, c.Problem, c.Outcome)
		}
	}
	t.Logf("%d of a's buys were refused by the fence (lock-lost)", lost)
	if lost == 0 {
		t.Error("the fence refused none of a's buys: the stale holder was not stopped by the fencing token")
	}
}

// TestKillInstanceMidBurst kills (SIGKILL) one of two instances in the
// middle of a burst. Its buyers in flight lose their answers (their outcome
// is unknown) and later ones cannot connect; its lock expires at the TTL
// and the other instance sells on. Every order in MySQL must still be a 201
// or one of those unknowns.
func TestKillInstanceMidBurst(t *testing.T) {
	r := newRig(t, rigOptions{})
	env := map[string]string{"SECKILL_STAGE": "redis-lock", "SECKILL_LOCK_TTL": "1s", "SECKILL_CRITICAL_SECTION_DELAY": "20ms"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "seckill instance killed with SIGKILL mid-burst", Stage: "redis-lock"}
	r.record(f)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "k"})
	bu.waitCompleted(requests/4, 30*time.Second)
	calls, killedAt, left := r.killMidBurst(f, bu, stock, a, b)
	checkMidBurst(t, "instance a", calls, killedAt, left)
}

// killMidBurst kills victim (SIGKILL) while bu runs, waits for the burst to
// end, and verifies it against stock with survivor live: victim's answers
// may be lost from the kill on. It returns the calls, when the kill struck
// (relative to the burst's start), and how many buys were left then.
func (r *rig) killMidBurst(f *figures, bu *burst, stock int, victim, survivor *instance) (calls []call, killedAt time.Duration, left int64) {
	r.t.Helper()
	w := window{from: bu.now()}
	killedAt = bu.now() // answers lost from here on are the kill's doing
	left = int64(bu.o.requests) - bu.completed.Load()
	victim.kill()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		r.t.Fatal(err)
	}
	w.to = bu.now()
	r.verify(f, calls, stock, w, expect{
		slugs:         faultSlugs,
		mayLoseAnswer: func(c call) bool { return c.Instance == victim.name && c.End >= killedAt },
	}, survivor)
	return calls, killedAt, left
}

// checkMidBurst fails the test unless the fault that struck at `at` hit a
// running burst: buys were left to answer then (left), and buys were sent
// after it.
func checkMidBurst(t *testing.T, what string, calls []call, at time.Duration, left int64) {
	t.Helper()
	started := 0
	for _, c := range calls {
		if c.Op == "buy" && c.Start >= at {
			started++
		}
	}
	if left <= 0 || started == 0 {
		t.Errorf("%s died when the burst was over (%d buys unanswered, %d sent after): the fault hit no buyer", what, left, started)
	}
}

// TestRedLockServerRestartedEmpty runs the redlock stage over three Redis
// servers, kills one mid-burst and restarts it empty, then kills two (the
// majority) and restarts them empty as well. With a minority gone RedLock
// sells on; with the majority gone buyers are refused within the lock wait;
// a server restarted empty forgets the locks it granted, which can hand out
// a second lock: the fencing token must make that harmless.
func TestRedLockServerRestartedEmpty(t *testing.T) {
	r := newRig(t, rigOptions{redlock: 3})
	wait := 2 * time.Second
	env := map[string]string{"SECKILL_STAGE": "redlock", "SECKILL_LOCK_TTL": "1s", "SECKILL_LOCK_WAIT": wait.String(), "SECKILL_CRITICAL_SECTION_DELAY": "20ms"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests, workers := burstSize()
	requests = pick(150, 500)
	r.reset(a, stock+requests/10) // enough that the burst still sells when the majority goes
	stock += requests / 10
	f := &figures{Test: t.Name(), Fault: "RedLock: 1 of 3 Redis servers killed and restarted empty, then 2 of 3", Stage: "redlock"}
	r.record(f)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "rl"})
	bu.waitCompleted(requests/6, 30*time.Second)
	w := window{from: bu.now()}
	// kill kills servers and notes when, and how many buys were left.
	type death struct {
		at   time.Duration
		left int64
	}
	kill := func(ps ...*testenv.RedisProcess) death {
		d := death{left: int64(requests) - bu.completed.Load()}
		for _, p := range ps {
			p.Kill()
		}
		d.at = bu.now()
		return d
	}
	minority := kill(r.redlock[0])
	sleepCtx(t.Context(), pick(time.Second, 3*time.Second))
	r.redlock[0].Restart()
	sleepCtx(t.Context(), 500*time.Millisecond)
	majority := kill(r.redlock[1], r.redlock[2])
	sleepCtx(t.Context(), wait+pick(500*time.Millisecond, time.Second)) // longer than the lock wait
	majorityBack := bu.now()
	r.redlock[1].Restart()
	r.redlock[2].Restart()
	w.to = bu.now()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Correct whether RedLock fails fast (503) or waits out the lock wait
	// (429) when no majority answers.
	r.verify(f, calls, stock, w, expect{slugs: faultSlugs}, a)

	// The servers died under load, not after the burst.
	checkMidBurst(t, "the first RedLock server", calls, minority.at, minority.left)
	checkMidBurst(t, "the RedLock majority", calls, majority.at, majority.left)
	// A buy that began and ended while two of three servers were dead had no
	// quorum to lock with: it cannot have sold.
	for _, c := range calls {
		if c.Op == "buy" && c.Start >= majority.at && c.End <= majorityBack && c.Outcome == outOK {
			t.Errorf("buy %d on %s sold (order %s) with two of three RedLock servers dead", c.ID, c.Instance, c.OrderNo)
		}
	}
}
