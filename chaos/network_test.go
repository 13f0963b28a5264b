package chaos

import (
	"fmt"
	"testing"
	"time"
)

// Problem types a buy may legitimately get while the backends misbehave.
var faultSlugs = []string{"sold-out", "lock-timeout", "lock-lost", "unavailable", "timeout"}

// sizes of the default burst: stock, requests, workers.
func burstSize() (stock, requests, workers int) {
	return pick(45, 200), pick(90, 400), pick(12, 32)
}

// TestRedisLatency adds 200 ms ± 50 ms to every Redis answer for the middle
// of a burst against two redis-lock instances. Every buy takes several
// Redis round trips, so queues form behind the lock and many buyers time
// out waiting (429); none may be sold twice or lose its order.
func TestRedisLatency(t *testing.T) {
	r := newRig(t, rigOptions{})
	env := map[string]string{"SECKILL_MODE": "redis-lock", "SECKILL_LOCK_WAIT": "2s"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "Redis answers delayed 200 ms ± 50 ms (toxiproxy latency, downstream)", Mode: "redis-lock"}
	r.record(f)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "lat"})
	bu.waitCompleted(requests/5, 30*time.Second)
	w := window{from: bu.now()}
	heal := r.redisPx.toxic("latency", "latency", "downstream", 1, map[string]any{"latency": 200, "jitter": 50})
	sleepCtx(t.Context(), pick(2*time.Second, 5*time.Second))
	heal()
	w.to = bu.now()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Lock wait 2s plus a few delayed round trips around it.
	r.verify(f, calls, stock, w, expect{slugs: faultSlugs, bound: 5 * time.Second}, a)
}

// TestRedisBlackholeWhileLocksHeld drops every packet to and from Redis for
// twice the lock TTL while a buyer holds the lock. Holders cannot renew or
// release, waiters cannot ask; the lease runs out in Redis. Buyers must get
// 503 unavailable (or 429) within the Redis client's timeouts, not hang,
// and the fencing token must refuse any write from a lease that ran out.
func TestRedisBlackholeWhileLocksHeld(t *testing.T) {
	r := newRig(t, rigOptions{})
	ttl := pick(time.Second, 2*time.Second)
	env := map[string]string{"SECKILL_MODE": "redis-lock", "SECKILL_LOCK_TTL": ttl.String(), "SECKILL_CRITICAL_SECTION_DELAY": "50ms"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "Redis blackholed (toxiproxy timeout, both ways) for 2× the lock TTL while a lock is held", Mode: "redis-lock"}
	r.record(f)

	rc := r.redis.Client()
	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: workers, pace: pick[time.Duration](60, 30) * time.Millisecond, deadline: 15 * time.Second, prefix: "bh"})
	bu.waitCompleted(requests/5, 30*time.Second)
	if !waitUntil(5*time.Second, func() bool { return lockHeld(t.Context(), rc) }) {
		t.Fatal("no lock was held during the burst")
	}
	w := window{from: bu.now()}
	heal := r.redisPx.blackhole()
	sleepCtx(t.Context(), 2*ttl)
	heal()
	w.to = bu.now()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r.verify(f, calls, stock, w, expect{slugs: faultSlugs, bound: 15 * time.Second}, a)
}

// TestRedisResetMidLua resets Redis connections right after a command went
// out, so the Lua script of redis-atomic ran but its answer never came
// back: Redis reserved a unit the instance does not know about. The buyer
// gets 503; the reservation stays pending until the reconcile job settles
// it. At all times Redis stock plus open reservations equals MySQL stock.
func TestRedisResetMidLua(t *testing.T) {
	r := newRig(t, rigOptions{})
	env := map[string]string{"SECKILL_MODE": "redis-atomic"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "Redis connection reset after a Lua call was sent, before its answer (toxiproxy reset_peer, downstream)", Mode: "redis-atomic"}
	r.record(f)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "rst"})
	bu.waitCompleted(requests/5, 30*time.Second)
	w := window{from: bu.now()}
	heal := r.redisPx.toxic("reset", "reset_peer", "downstream", 1, map[string]any{"timeout": 0})
	sleepCtx(t.Context(), pick(500*time.Millisecond, 2*time.Second))
	heal()
	w.to = bu.now()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// already-purchased is possible here: the Redis client retries a
	// script whose answer was lost, and the retry finds its own
	// reservation. The buyer is told no; the reservation is given back.
	r.verify(f, calls, stock, w, expect{slugs: append([]string{"already-purchased"}, faultSlugs...), bound: 10 * time.Second}, a)
	r.checkRedisCopy(t.Context(), pick(false, true))
}

// TestMySQLBlackhole drops every packet to and from MySQL for a few seconds
// of a burst. Buyers inside the critical section wait on a database that
// never answers; the question is whether they get an answer at all.
func TestMySQLBlackhole(t *testing.T) {
	r := newRig(t, rigOptions{})
	env := map[string]string{"SECKILL_MODE": "redis-lock"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "MySQL blackholed (toxiproxy timeout, both ways) during a burst", Mode: "redis-lock"}
	r.record(f)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "my"})
	bu.waitCompleted(requests/5, 30*time.Second)
	w := window{from: bu.now()}
	heal := r.mysql.blackhole()
	sleepCtx(t.Context(), pick(3*time.Second, 6*time.Second))
	heal()
	w.to = bu.now()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r.verify(f, calls, stock, w, expect{slugs: faultSlugs, bound: 10 * time.Second}, a)
}

// TestMySQLBlackholeOutlastsDeadline keeps MySQL blackholed for longer than
// a client waits. The buyer inside the critical section is stuck on a
// statement that will never be answered; unless the server bounds its own
// work and answers 503 /problems/timeout in time, that client gets nothing.
func TestMySQLBlackholeOutlastsDeadline(t *testing.T) {
	r := newRig(t, rigOptions{})
	env := map[string]string{"SECKILL_MODE": "redis-lock"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	deadline := 5 * time.Second
	f := &figures{Test: t.Name(), Fault: fmt.Sprintf("MySQL blackholed for longer than the %v client deadline", deadline), Mode: "redis-lock"}
	r.record(f)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: deadline, prefix: "myl"})
	bu.waitCompleted(requests/5, 30*time.Second)
	w := window{from: bu.now()}
	heal := r.mysql.blackhole()
	sleepCtx(t.Context(), deadline+2*time.Second)
	heal()
	w.to = bu.now()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r.verify(f, calls, stock, w, expect{slugs: faultSlugs, bound: deadline}, a)
}
