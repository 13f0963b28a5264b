package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// keyedAnswer is one answer to a request with an Idempotency-Key.
type keyedAnswer struct {
	status     int // 0: no answer
	replayed   bool
	body       []byte
	start, end time.Duration // since the test's start
}

// keyed is one key of TestKeyRecordsAcrossSentinelFailover: the request it
// was first sent with, and the answers.
type keyed struct {
	path, body, key string
	first, retry    keyedAnswer
}

// send sends k's request, with its key, to in, timed from start.
func (r *rig) send(start time.Time, in *instance, k *keyed) (a keyedAnswer) {
	a.start = time.Since(start)
	defer func() { a.end = time.Since(start) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.url+k.path, strings.NewReader(k.body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", k.key)
	resp, err := r.client.Do(req)
	if err != nil {
		return a
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return a
	}
	a.status, a.replayed, a.body = resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", b
	return a
}

// definite reports whether an answer is one a retry must replay: a
// success or a refusal (a 5xx promises nothing and is not stored).
func (a keyedAnswer) definite() bool { return a.status >= 200 && a.status < 500 }

// TestKeyRecordsAcrossSentinelFailover: redis-stream at durability
// replica on a Sentinel group, every request with an Idempotency-Key. A
// burst of buys is accepted; once their orders are written, each is paid
// with a key of its own while the replica is stopped and its link cut, so
// that nothing written then reaches it; the primary is SIGKILLed and the
// replica promoted, the old primary back as its replica. Then every key is
// sent again, and every key whose first answer was definite (2xx, 4xx) must
// be answered by a replay of it (Idempotent-Replayed: true, the same status
// and body): an instance tells a buyer nothing that a retry across the
// failover would not find again. A key first answered 5xx must get a
// definite answer now.
func TestKeyRecordsAcrossSentinelFailover(t *testing.T) {
	r := newRig(t, rigOptions{})
	g := testenv.StartSentinelGroup(t)
	a := r.start("a", map[string]string{"SECKILL_STAGE": "redis-stream", "SECKILL_STREAM_CLAIM_IDLE": "1s",
		"SECKILL_REDIS_ADDR": "", "SECKILL_REDIS_SENTINELS": strings.Join(g.SentinelAddrs(), ","), "SECKILL_REDIS_MASTER": g.Master,
		"SECKILL_STREAM_DURABILITY": "replica", "SECKILL_STREAM_REPLICA_WAIT": "1s"})
	stock := pick(10, 40)
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Stage: "redis-stream, replica", Refused: map[string]int{},
		Fault: "redis-stream on Sentinel, every request with an Idempotency-Key: buys accepted, then paid with the replica stopped and its link cut, primary SIGKILLed, replica promoted, old primary back as its replica; every key sent again must replay its first definite answer (Requests counts keys, the 201 column 2xx first answers)"}
	r.record(f)
	fail := violations(t, f)
	ctx := t.Context()
	start := time.Now()

	var keys []*keyed
	var buys []*keyed
	for i := range stock / 2 {
		k := &keyed{path: "/api/v1/products/1/buy", body: fmt.Sprintf(`{"user_id":"kf-%d"}`, i), key: fmt.Sprintf("kf-buy-%d", i)}
		k.first = r.send(start, a, k)
		// A replica slowed past SECKILL_STREAM_REPLICA_WAIT (CPU hogs)
		// makes it outcome-unknown: queued all the same.
		if k.first.status != http.StatusAccepted && problemSlug(k.first.body) != "outcome-unknown" {
			t.Fatalf("buy %s with the group whole: %d %s, want 202 (or 503 outcome-unknown)", k.key, k.first.status, k.first.body)
		}
		buys = append(buys, k)
	}
	keys = append(keys, buys...)
	testkit.Eventually(t, "every accepted order is written to MySQL", time.Minute, func() bool {
		confirmed := 0
		for _, row := range r.orderRows(ctx) {
			if row.status == "confirmed" {
				confirmed++
			}
		}
		return confirmed == len(buys)
	})

	w := window{from: time.Since(start)}
	g.HoldReplication()
	rows := r.orderRows(ctx)
	// The payments go at once: each may wait out SECKILL_STREAM_REPLICA_WAIT
	// for a replica that cannot confirm, and one after another they kept
	// the link down so long (beside CPU hogs) that the Sentinels no longer
	// counted the replica fit to promote (a link down for over ten times
	// down-after-milliseconds), and no failover came.
	var pays []*keyed
	var wg sync.WaitGroup
	for _, row := range rows {
		k := &keyed{path: "/api/v1/orders/" + row.no + "/pay", body: fmt.Sprintf(`{"user_id":%q}`, row.user), key: "kf-pay-" + row.no}
		pays = append(pays, k)
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.first = r.send(start, a, k)
		}()
	}
	wg.Wait()
	keys = append(keys, pays...)
	g.Primary.Kill()
	g.ReleaseReplication()
	g.WaitFailover()
	g.Rejoin()
	w.to = time.Since(start)

	for _, k := range keys {
		// Until the app's client has found the new primary, a retry may
		// be told 503 (unavailable: nothing was run); it is sent again.
		if !testkit.Poll(30*time.Second, func() bool {
			k.retry = r.send(start, a, k)
			return k.retry.definite()
		}) {
			fail("key %s: no definite answer after the failover, last %d %s", k.key, k.retry.status, k.retry.body)
			continue
		}
		if !k.first.definite() {
			continue
		}
		if !k.retry.replayed || k.retry.status != k.first.status || !bytes.Equal(k.retry.body, k.first.body) {
			fail("key %s was answered %d %s, and after the failover it ran afresh: %d (replayed %v) %s",
				k.key, k.first.status, k.first.body, k.retry.status, k.retry.replayed, k.retry.body)
		}
	}
	var calls []call
	for _, k := range keys {
		// Counted as buys by p99: the payments during the fault too.
		calls = append(calls, call{Op: "buy", Start: k.first.start, End: k.first.end})
		f.MaxMs = max(f.MaxMs, (k.first.end - k.first.start).Milliseconds())
		f.Requests++
		switch {
		case k.first.status >= 200 && k.first.status < 300:
			f.Successes++
		case k.first.status == 0:
			f.Unknown++
		default:
			f.Refused[problemSlug(k.first.body)]++
		}
	}
	f.FaultMs = (w.to - w.from).Milliseconds()
	f.P99FaultMs = p99(calls, w.from, w.to).Milliseconds()
	initial, dbStock, live := r.conserved(ctx)
	f.Oversold = max(0, live-initial)
	f.Conserved = initial == stock && dbStock+live == stock
	if !f.Conserved {
		fail("MySQL: initial %d, stock %d, live units %d; want %d conserved", initial, dbStock, live, stock)
	}
	t.Logf("%d keys (%d buys, %d payments), first answers: %d 2xx, refused %v, %d unanswered", len(keys), len(buys), len(keys)-len(buys), f.Successes, f.Refused, f.Unknown)
}

// problemSlug is the problem type of a problem+json body, "" if none.
func problemSlug(body []byte) string {
	var p api.Problem
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	return strings.TrimPrefix(p.Type, api.ProblemTypePrefix)
}
