package chaos

import (
	"testing"
	"time"
)

// TestPauseHolderPastTTL freezes (SIGSTOP) an instance while it holds the
// lock of product 1, keeps it frozen for 2.5× the lock TTL while another
// instance sells, then thaws it (SIGCONT). The frozen holder wakes up
// believing it is inside the critical section; the fencing token at the
// stock write must refuse it (503 lock-lost) so nothing is sold twice.
func TestPauseHolderPastTTL(t *testing.T) {
	r := newRig(t, rigOptions{})
	ttl := pick(time.Second, 2*time.Second)
	env := map[string]string{"SECKILL_MODE": "redis-lock", "SECKILL_LOCK_TTL": ttl.String()}
	slow := map[string]string{"SECKILL_MODE": "redis-lock", "SECKILL_LOCK_TTL": ttl.String(), "SECKILL_CRITICAL_SECTION_DELAY": "300ms"}
	a, b := r.start("a", slow), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "seckill instance SIGSTOPped while holding the lock, for 2.5× the TTL, then SIGCONT", Mode: "redis-lock"}
	r.record(f)

	start := time.Now()
	// a alone sells first, so the lock held when the pause comes is a's.
	ba := r.fire(burstOptions{targets: []*instance{a}, requests: 6, workers: 2, deadline: 3*ttl + 5*time.Second, prefix: "pa", start: start})
	rc := r.redis.Client()
	if !waitUntil(5*time.Second, func() bool { return lockHeld(t.Context(), rc) }) {
		t.Fatal("a never held the lock")
	}
	w := window{from: time.Since(start)}
	a.pause()
	bb := r.fire(burstOptions{targets: []*instance{b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "pb", start: time.Now()})
	sleepCtx(t.Context(), ttl*5/2)
	a.resume()
	w.to = time.Since(start)
	callsA, err := ba.wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	callsB, err := bb.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r.verify(f, append(callsA, callsB...), stock, w, expect{
		slugs: faultSlugs,
		// a's buyers wait out the pause; they still get an answer.
		bound: 3*ttl + 5*time.Second,
	}, b)
	lost := 0
	for _, c := range callsA {
		if c.Problem == "lock-lost" {
			lost++
		}
	}
	t.Logf("%d of a's buys were refused by the fence (lock-lost)", lost)
}

// TestKillInstanceMidBurst kills (SIGKILL) one of two instances in the
// middle of a burst. Its buyers in flight lose their answers (their outcome
// is unknown) and later ones cannot connect; its lock expires at the TTL
// and the other instance sells on. Every order in MySQL must still be a 201
// or one of those unknowns.
func TestKillInstanceMidBurst(t *testing.T) {
	r := newRig(t, rigOptions{})
	env := map[string]string{"SECKILL_MODE": "redis-lock", "SECKILL_LOCK_TTL": "1s", "SECKILL_CRITICAL_SECTION_DELAY": "20ms"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "seckill instance killed with SIGKILL mid-burst", Mode: "redis-lock"}
	r.record(f)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "k"})
	bu.waitCompleted(requests/4, 30*time.Second)
	w := window{from: bu.now()}
	killedAt := bu.now() // answers lost from here on are the kill's doing
	a.kill()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w.to = bu.now()
	r.verify(f, calls, stock, w, expect{
		slugs:         faultSlugs,
		mayLoseAnswer: func(c call) bool { return c.Instance == a.name && c.End >= killedAt },
		bound:         5 * time.Second,
	}, b)
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
	env := map[string]string{"SECKILL_MODE": "redlock", "SECKILL_LOCK_TTL": "1s", "SECKILL_LOCK_WAIT": wait.String(), "SECKILL_CRITICAL_SECTION_DELAY": "20ms"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests, workers := burstSize()
	requests = pick(150, 500)
	r.reset(a, stock+requests/10) // enough that the burst still sells when the majority goes
	stock += requests / 10
	f := &figures{Test: t.Name(), Fault: "RedLock: 1 of 3 Redis servers killed and restarted empty, then 2 of 3", Mode: "redlock"}
	r.record(f)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "rl"})
	bu.waitCompleted(requests/6, 30*time.Second)
	w := window{from: bu.now()}
	r.redlock[0].Kill()
	sleepCtx(t.Context(), pick(time.Second, 3*time.Second))
	r.redlock[0].Restart()
	sleepCtx(t.Context(), 500*time.Millisecond)
	r.redlock[1].Kill()
	r.redlock[2].Kill()
	sleepCtx(t.Context(), wait+pick(500*time.Millisecond, time.Second)) // longer than the lock wait
	r.redlock[1].Restart()
	r.redlock[2].Restart()
	w.to = bu.now()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Correct whether RedLock fails fast (503) or waits out the lock wait
	// (429) when no majority answers: either way within wait + margin.
	r.verify(f, calls, stock, w, expect{slugs: faultSlugs, bound: wait + 1500*time.Millisecond}, a)
}
