package idempotency

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The reads of Used, gathered. After a sell-out every keyed buyer costs one
// EXISTS (see Used), and in a post-sale wave many are in flight at once on
// each instance. A read that finds none in flight is sent alone, as ever;
// the reads that arrive while one is in flight wait, and go together, in
// one pipeline, as soon as it ends: one write and one read on the
// connection, here and in Redis, for all of them, with no timer to gather
// them and no wait beyond the read in flight. This is the same group commit
// as the sale's (internal/inventory/redisstage/group_commit.go), for a read.
//
// A pipeline goes through the Store's batch client when it has one
// (SetBatchClient): a client whose pool checks each connection before use.
// The app's own client does not (internal/redisconn), so a connection the
// server closed fails the next command sent on it; for a lone read that
// costs its one reader, but a pipeline sent on it would fail all of its
// readers, each a keyed buyer answered 503. The check is one system call a
// pipeline, paid only when reads pile up.

// maxUsedBatch bounds one pipeline; more wait for the next.
const maxUsedBatch = 256

// usedReads is the Store's queue of Used reads.
type usedReads struct {
	mu      sync.Mutex
	busy    bool             // a read or a pipeline is in flight
	stalled bool             // a waiter gave up on it: reads go alone until it ends
	waiting []*usedRead      // arrived while it was
	stall   <-chan time.Time // tests: in place of each waiter's patience
}

// usedRead is one waiting read: its key and its reader's context, then
// the answer.
type usedRead struct {
	ctx   context.Context
	key   string
	alone atomic.Bool // its reader gave up waiting and sent it itself
	n     int64
	err   error
	done  chan struct{}
}

// exists reads whether key exists: alone when no read is in flight, else in
// the next pipeline. Its reader's context bounds the wait, and its patience
// the time it waits for the pipeline: a read in flight that does not come
// back (a dead pooled connection, a Cluster node that went silent) must
// not fail every read behind it, which before the queue each went on a
// connection of their own. A reader whose pipeline has not answered within
// half the time left to its deadline sends its read alone, and so do the
// reads that arrive after that until the stalled one ends: a fault costs
// the readers behind it at most half their time, not all of it.
func (s *Store) exists(ctx context.Context, key string) (bool, error) {
	q := &s.used
	q.mu.Lock()
	if q.stalled {
		q.mu.Unlock()
		return s.existsAlone(ctx, key)
	}
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		// Deferred: a read that panics (a hook, the client) must still
		// hand on the queue, or it would stay busy for good and every later
		// read would wait out its deadline behind it.
		defer s.nextUsedBatch()
		return s.existsAlone(ctx, key)
	}
	r := &usedRead{ctx: ctx, key: key, done: make(chan struct{})}
	q.waiting = append(q.waiting, r)
	patience := q.stall
	q.mu.Unlock()
	if patience == nil {
		if d, ok := ctx.Deadline(); ok {
			t := time.NewTimer(time.Until(d) / 2)
			defer t.Stop()
			patience = t.C
		} // else: bounded by the client's read timeout
	}
	select {
	case <-r.done:
		return r.n > 0, r.err
	case <-ctx.Done():
		// The pipeline may still send the key: a read, harmless.
		return false, context.Cause(ctx)
	case <-patience:
		r.alone.Store(true) // a pipeline yet to go leaves it out
		q.mu.Lock()
		// Only while a read is in flight: its end clears the mark (and the
		// queue may have gone idle since the patience ran out).
		q.stalled = q.busy
		q.mu.Unlock()
		return s.existsAlone(ctx, key)
	}
}

// existsAlone reads whether key exists, in a command of its own.
func (s *Store) existsAlone(ctx context.Context, key string) (bool, error) {
	n, err := s.rdb.Exists(ctx, key).Result()
	return n > 0, err
}

// nextUsedBatch hands the reads that waited to a goroutine that sends them
// and then the ones that wait meanwhile, until none waits.
func (s *Store) nextUsedBatch() {
	if batch := s.takeUsedBatch(); len(batch) > 0 {
		go func() {
			for ; len(batch) > 0; batch = s.takeUsedBatch() {
				s.sendUsedBatch(batch)
			}
		}()
	}
}

// takeUsedBatch takes up to maxUsedBatch waiting reads, or, when none
// waits, marks the queue idle.
func (s *Store) takeUsedBatch() []*usedRead {
	q := &s.used
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stalled = false // what stalled, if anything, has ended
	n := min(len(q.waiting), maxUsedBatch)
	if n == 0 {
		q.busy = false
		return nil
	}
	batch := q.waiting[:n:n]
	q.waiting = append([]*usedRead(nil), q.waiting[n:]...)
	return batch
}

// sendUsedBatch sends the reads whose readers still wait, bounded by the
// latest of their deadlines, and answers each: one read alone, more in one
// pipeline.
func (s *Store) sendUsedBatch(batch []*usedRead) {
	var live []*usedRead
	var deadline time.Time
	bounded := true
	for _, r := range batch {
		if r.ctx.Err() != nil || r.alone.Load() {
			close(r.done) // its reader has gone, or sent it alone
			continue
		}
		live = append(live, r)
		if d, ok := r.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if len(live) == 1 {
		r := live[0]
		r.n, r.err = s.rdb.Exists(ctx, r.key).Result()
		close(r.done)
		return
	}
	cmds := make([]*redis.IntCmd, len(live))
	_, err := s.batches.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range live {
			cmds[i] = p.Exists(ctx, r.key)
		}
		return nil
	})
	// Each command carries its own error, as go-redis sets them, except
	// when the pipeline fails as a whole with none set (a hook that
	// returns an error without calling on): then no reply was read, and
	// a zero count must not pass for "never used". (A lone read gets its
	// error from Process either way.) When some command carries one, the
	// others' replies were read, as on a Cluster whose one node failed.
	clean := true
	for _, c := range cmds {
		if c.Err() != nil {
			clean = false
			break
		}
	}
	for i, r := range live {
		r.n, r.err = cmds[i].Result()
		if err != nil && clean {
			r.n, r.err = 0, err
		}
		close(r.done)
	}
}
