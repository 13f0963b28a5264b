package orderwriter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// A writer tries again, itself, the entries it read and could not finish:
// a write that failed transiently (the pool's MySQL connections killed, a
// deadlock, a short outage), a settle that did not reach Redis. Such an
// entry stays pending to this writer, and nothing else would look at it
// before ClaimIdle, when a take-over (XAUTOCLAIM) delivers it again. So a
// worker whose round failed keeps its item, waits, and runs another round
// that first reads its own pending entries. The wait starts at
// RetryBackoff and doubles with each failed round in a row, up to
// RetryBackoffMax: while the database is down, an item costs one try per
// RetryBackoffMax, not a loop. A round that goes through resets it.
//
// Its own entries are read with XPENDING (filtered to this consumer) and
// XRANGE, which leave each entry's idle time and delivery count as they
// were. A writer that cannot reach the database (cut off from it alone)
// still loses its entries to a writer that can, ClaimIdle after their
// last delivery, and MaxDeliveries still counts deliveries, not retries.
// Reading them again with XREADGROUP from id 0 would reset the idle time
// at every retry and keep the other writers off for as long as this one
// fails. A retried order written already (the answer to its commit was
// lost) meets its own row: the unique order number turns the retry into a
// read of that row, as for any second write.

// backoff is the wait before a failed worker's next round.
type backoff struct {
	first, max, next time.Duration
}

// wait returns the wait before the next round and doubles the one after.
func (b *backoff) wait() time.Duration {
	d := b.next
	if d <= 0 {
		d = b.first
	}
	b.next = min(2*d, b.max)
	return d
}

// retryAfter waits d before a retry round, and reports false when ctx
// ended first.
func (w *Writer) retryAfter(ctx context.Context, id int64, d time.Duration) bool {
	if w.opts.BeforeRetry != nil {
		w.opts.BeforeRetry(id, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// resume takes in the rounds asked for while the worker waited (a
// wake-up, a recovery pass): the retry round is that round, and it takes
// entries over if one of them asked to.
func (w *Writer) resume(id int64) (claim bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.busy[id]
	claim = r.claim
	r.again, r.claim = false, false
	return claim
}

// own returns up to Batch of the entries pending to this writer, oldest
// first. An entry pending and no longer in the stream has nothing left to
// write: it is acknowledged, as XAUTOCLAIM drops such entries.
func (w *Writer) own(ctx context.Context, id int64) ([]redis.XMessage, error) {
	stream := w.q.QueueKeys(id).Stream
	p, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: GroupName, Start: "-", End: "+",
		Count: int64(w.opts.Batch), Consumer: w.opts.Consumer,
	}).Result()
	switch {
	case err != nil && strings.HasPrefix(err.Error(), "NOGROUP"):
		return nil, nil // the stream was dropped (a reset), and its entries with it
	case err != nil:
		return nil, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	case len(p) == 0:
		return nil, nil
	}
	pipe := w.rdb.Pipeline()
	reads := make([]*redis.XMessageSliceCmd, len(p))
	for i, e := range p {
		reads[i] = pipe.XRangeN(ctx, stream, e.ID, e.ID, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	}
	msgs := make([]redis.XMessage, 0, len(p))
	var gone []string
	for i, r := range reads {
		if len(r.Val()) == 0 {
			gone = append(gone, p[i].ID)
			continue
		}
		msgs = append(msgs, r.Val()[0])
	}
	if len(gone) > 0 {
		if err := w.rdb.XAck(ctx, stream, GroupName, gone...).Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
		}
	}
	return msgs, nil
}
