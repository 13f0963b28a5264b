package chaos

import (
	"bytes"
	"fmt"
	"os"
	"strings"
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

// TestPauseHolderAfterItsLastLeaseCheck stops an instance after every
// check of its lease and before its stock write reaches MySQL, keeps it
// stopped until its lease has run out and another instance has sold, and
// then lets it go on. TestPauseHolderPastTTL's pause lands before the
// holder's last look at its lease, which then stops it whatever the
// database does; this pause is the one no check can see, and only the
// fencing token at the stock write stops the stale write.
//
// The pause point is forced, not hoped for: with
// SECKILL_FREEZE_BEFORE_FENCED_WRITE, a's first fenced write stops the
// whole process (SIGSTOP to itself) in its write of the batch to the
// socket, after the driver's last look at the section's context, whose
// Err and Done look at the lease's clock, and waits there for SIGCONT.
// When the test sends it the bytes go out, whatever a's timers then say
// (freeze.go in the store), and a's log says so.
func TestPauseHolderAfterItsLastLeaseCheck(t *testing.T) {
	r := newRig(t, rigOptions{})
	ttl := pick(time.Second, 2*time.Second)
	env := map[string]string{"SECKILL_STAGE": "redis-lock", "SECKILL_LOCK_TTL": ttl.String()}
	// a's request deadline is far, so that its answer after the pause is
	// about its lease and the fence, not a timeout.
	frozen := map[string]string{"SECKILL_STAGE": "redis-lock", "SECKILL_LOCK_TTL": ttl.String(), "SECKILL_REQUEST_TIMEOUT": "60s", "SECKILL_FREEZE_BEFORE_FENCED_WRITE": "true"}
	a, b := r.start("a", frozen), r.start("b", env)
	stock, requests, workers := burstSize()
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "seckill instance SIGSTOPped after its last lease check, as its stock write went to MySQL, until its lease ran out and another instance sold, then SIGCONT", Stage: "redis-lock"}
	r.record(f)

	start := time.Now()
	ba := r.fire(burstOptions{targets: []*instance{a}, requests: 1, workers: 1, deadline: 2 * time.Minute, prefix: "fa", start: start})
	if !testkit.Poll(time.Minute, a.stopped) {
		t.Fatal("a never stopped itself before its fenced write")
	}
	w := window{from: time.Since(start)}
	bb := r.fire(burstOptions{targets: []*instance{b}, requests: requests, workers: workers, pace: pick[time.Duration](40, 25) * time.Millisecond, deadline: 10 * time.Second, prefix: "fb", start: start})
	// b can sell only once a's lease has expired in Redis: a's write, when
	// it lands, is a stale holder's.
	if !testkit.Poll(time.Minute, func() bool { return bb.count(func(c call) bool { return c.Outcome == outOK }) > 0 }) {
		t.Error("b sold nothing while a was stopped")
	}
	// The order is forced, and checked: a is still stopped, and its write
	// has not reached MySQL (a write sent before the stop took hold would
	// be a fresh one, which the fence rightly lets through).
	if !a.stopped() {
		t.Fatal("a ran again before b sold")
	}
	if n := r.orders("fa-%"); n != 0 {
		t.Fatalf("a's write reached MySQL before a stopped (%d order rows): the pause came after the write", n)
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
	// The stale write reached MySQL: a's log says the frozen batch went
	// out. Without it, nothing here would show the fence at work.
	if !testkit.Poll(30*time.Second, func() bool { return strings.Contains(tail(a.log, 1<<20), "the frozen fenced write went out") }) {
		t.Fatalf("a's log does not say that its frozen write went out:\n%s", tail(a.log, 4000))
	}
	if line := logLine(a.log, "the frozen fenced write went out"); !strings.Contains(line, "err=<nil>") {
		t.Errorf("a's frozen write did not go out whole: %s", line)
	}
	r.verify(f, append(callsA, callsB...), stock, w, expect{slugs: faultSlugs}, b)
	for _, c := range callsA {
		// Refused by the fence (lock-lost), or its answer cut off when a's
		// lease ended on resuming (outcome-unknown): never an order.
		if c.Problem != "lock-lost" && c.Problem != "outcome-unknown" {
			t.Errorf("a's buy %d, stopped after its last lease check and written after its lease ran out, got %d %q (%s), want 503 lock-lost or outcome-unknown", c.ID, c.Status, c.Problem, c.Outcome)
		}
	}
	if n := r.orders("fa-%"); n != 0 {
		t.Errorf("a's stale write left %d order rows: the fence did not refuse it", n)
	}
}

// stopped reports whether the process is stopped (SIGSTOP), read from
// its state in /proc.
func (in *instance) stopped() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", in.cmd.Process.Pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ")".
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'T'
}

// logLine returns the last line of the log at path that holds s, or "".
func logLine(path, s string) string {
	lines := strings.Split(tail(path, 1<<20), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
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
