package redisstage

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The reservation scripts of concurrent buyers, gathered. A script that
// finds fewer than maxFlying in flight is sent alone, as ever; the scripts
// that arrive while they are wait, and go together, in one pipeline, as
// soon as one ends: one write and one read on the connection for all of
// them, with no timer to gather them. The same queue as the Used reads'
// (internal/idempotency/used.go), for a write, and with no goroutine of
// its own: the first buyer of a batch sends it. 128 buyers at once on one
// instance (BenchmarkReserveBatch) cost 0.54-0.56 times the CPU per sale,
// this process and Redis together, with 0.04-0.06 writes per sale where
// they took 1.02; two buyers cost the same as without (docs/performance.md).
//
// A write changes what a buyer who stops waiting may be told:
//   - a buyer whose request ends while its script still waits to be taken
//     leaves, and its script is never sent: nothing was taken;
//   - once taken into a pipeline, a script may run: its buyer waits for
//     the answer, which the pipeline, bounded by the earliest deadline of
//     its members, gives by the buyer's own deadline. A timeout there is
//     the same unknown as a lone script's (the buyer is told unavailable,
//     the order is never written, and the reconcile job gives back a unit
//     the script took);
//   - one script's error (a refusal is an answer, not an error) is its own
//     buyer's: the others' replies were read.
//
// A batch goes through the stage's batch client (SetBatchClient; by
// default its own). The app's clients skip go-redis's check of a pooled
// connection before use (internal/redisconn), so a connection the server
// closed (a restart, CLIENT KILL) fails the next command sent on it: one
// buyer for a lone script, every buyer of a batch. The app gives the
// stage a second client, a small pool whose connections go-redis checks
// before each use: a stale one is dropped before a batch is sent on it,
// and the check's system call is paid once a batch, shared by its buyers.
// Lone scripts keep the stage's client, and cost at most one buyer per
// stale connection (TestBatchOnStaleConnectionsCostsNoBuyer).

// maxReserveBatch bounds one pipeline; more wait for the next.
const maxReserveBatch = 128

// maxFlying is how many scripts or batches may be in flight before the
// next script waits: with two, a pair of buyers (the most a quiet sale
// sees at once) never waits for each other, and pays nothing for the
// queue.
const maxFlying = 2

// reserveQueue is a stage's queue of reservation scripts.
type reserveQueue struct {
	off     bool // every script alone (a benchmark's baseline)
	limit   int  // in flight before a script waits: maxFlying, or a test's
	mu      sync.Mutex
	flying  int          // scripts or batches in flight, at most limit
	waiting []*queuedRun // arrived while limit were
}

// queuedRun is one waiting script: its keys and args and its buyer's
// context, then the answer, or the batch it is to send.
type queuedRun struct {
	ctx   context.Context
	keys  []string
	args  []any
	taken bool         // in a batch: its buyer can no longer leave (under mu)
	batch []*queuedRun // set when its buyer is to send this batch (it heads it)
	v     any
	err   error
	done  chan struct{} // closed with v and err, or with batch
}

// reserveRun runs reserve.lua for one buyer: alone, or in the next batch
// when maxFlying scripts or batches are in flight.
func (s *RedisAtomic) reserveRun(ctx context.Context, keys []string, args []any) (any, error) {
	q := &s.reserves
	if q.off {
		return reserve.Run(ctx, s.rdb, keys, args...).Result()
	}
	q.mu.Lock()
	if q.flying < q.limit {
		q.flying++
		q.mu.Unlock()
		// Deferred: a script that panics (a hook) must still hand on
		// the queue.
		defer s.nextReserves()
		return reserve.Run(ctx, s.rdb, keys, args...).Result()
	}
	r := &queuedRun{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	q.waiting = append(q.waiting, r)
	q.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		q.mu.Lock()
		if !r.taken {
			q.waiting = withoutRun(q.waiting, r)
			q.mu.Unlock()
			return nil, context.Cause(ctx) // never sent: nothing taken
		}
		q.mu.Unlock()
		// Taken: its answer comes by the batch's deadline, no later than
		// this buyer's.
		<-r.done
	}
	if r.batch != nil {
		// This buyer sends its batch, answers the others, and hands on
		// the queue: no goroutine of its own, and one wake-up a batch.
		defer s.nextReserves()
		s.sendReserves(r.batch)
	}
	return r.v, r.err
}

// nextReserves, called as a script or a batch in flight ends, hands the
// scripts that waited to the first of their buyers to send, or, when none
// waits, counts one fewer in flight.
func (s *RedisAtomic) nextReserves() {
	q := &s.reserves
	q.mu.Lock()
	var batch []*queuedRun
	rest := q.waiting[:0]
	for _, r := range q.waiting {
		switch {
		case r.ctx.Err() != nil:
			// Its buyer is leaving: never sent (reserveRun answers it).
		case len(batch) < maxReserveBatch:
			r.taken = true
			batch = append(batch, r)
		default:
			rest = append(rest, r)
		}
	}
	q.waiting = rest
	if len(batch) == 0 {
		q.flying--
	}
	q.mu.Unlock()
	if len(batch) > 0 {
		batch[0].batch = batch
		close(batch[0].done)
	}
}

// sendReserves runs a batch's scripts, bounded by the earliest of their
// buyers' deadlines (one alone, more in one pipeline), and answers each.
func (s *RedisAtomic) sendReserves(batch []*queuedRun) {
	deadline, bounded := time.Time{}, false
	for _, r := range batch {
		if d, ok := r.ctx.Deadline(); ok && (!bounded || d.Before(deadline)) {
			deadline, bounded = d, true
		}
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if len(batch) == 1 {
		r := batch[0]
		r.v, r.err = reserve.Run(ctx, s.rdb, r.keys, r.args...).Result()
		return
	}
	answered := 1 // the head's done was closed to make it send
	defer func() {
		// Reached with members unanswered only when a hook or the client
		// panicked: they must not wait for good.
		for _, r := range batch[answered:] {
			r.v, r.err = nil, errBatchAbandoned
			close(r.done)
		}
	}()
	cmds := make([]*redis.Cmd, len(batch))
	_, err := s.batches.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range batch {
			cmds[i] = reserve.EvalSha(ctx, p, r.keys, r.args...)
		}
		return nil
	})
	// As in the Used reads: a pipeline that failed with no command's
	// error set (a hook that did not call on) read no reply.
	clean := true
	for _, c := range cmds {
		if c.Err() != nil {
			clean = false
			break
		}
	}
	for i, r := range batch {
		r.v, r.err = cmds[i].Result()
		if err != nil && clean {
			r.v, r.err = nil, err
		} else if r.err != nil && redis.HasErrorPrefix(r.err, "NOSCRIPT") {
			// A restarted or flushed Redis: this one again, alone, with
			// the script's source as fallback. It did not run.
			r.v, r.err = reserve.Run(ctx, s.batches, r.keys, r.args...).Result()
		}
		if i > 0 {
			close(r.done)
			answered++
		}
	}
}

// errBatchAbandoned answers the members of a batch whose sender panicked:
// their scripts may have run.
var errBatchAbandoned = errors.New("the batch of reservation scripts was abandoned")

// withoutRun returns list without r, in place.
func withoutRun(list []*queuedRun, r *queuedRun) []*queuedRun {
	for i, x := range list {
		if x == r {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}
