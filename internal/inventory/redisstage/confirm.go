package redisstage

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Confirms, off the buyer's path.
//
// A redis-atomic sale's reservation is forgotten (confirmed) once its order
// is committed. The buyer's answer does not depend on it: "bought" is true
// as soon as the row is in the database, and a reservation left behind is
// settled by the reconcile job, which finds the order and keeps the unit
// sold (RedisAtomic.Repair). So the buyer does not wait for it. A committed
// sale queues its confirm and is answered; the confirms queued while one
// exchange is in flight (the other members of its group commit, whose
// answers go out together, and the groups after it) leave together in the
// next one: one pipeline of one HDEL per item, sent by a goroutine of the
// stage's own. A keyless sale is then one round trip to Redis on the
// buyer's path, the reservation script, where it was two.
//
// A confirm that fails (Redis down, a timeout), or that is still queued
// when the process ends, is lost, and repaired as before: once the
// reservation is older than the reconcile job's staleness, the job keeps
// the unit sold because the order exists. Until then the item counts as
// busy to the job, which leaves its copy's stock alone (Repair).

// confirmTimeout bounds one exchange of confirms.
const confirmTimeout = 5 * time.Second

// maxConfirmBatch bounds one exchange; more wait for the next.
const maxConfirmBatch = 1024

// maxConfirmsQueued bounds the queue while Redis does not answer: a confirm
// beyond it is dropped, and left to the reconcile job.
const maxConfirmsQueued = 1 << 16

// confirmer sends the confirms of a stage's committed sales.
type confirmer struct {
	rdb redis.UniversalClient
	log *slog.Logger

	mu      sync.Mutex
	queued  []confirm
	sending bool          // a goroutine is sending, and takes what is queued
	added   uint64        // confirms queued or dropped, ever
	ended   uint64        // of those, sent (or failed, or dropped)
	changed chan struct{} // closed when ended grows
}

// confirm is one reservation to forget: its pending hash and order no.
type confirm struct{ pending, no string }

func newConfirmer(rdb redis.UniversalClient, log *slog.Logger) *confirmer {
	return &confirmer{rdb: rdb, log: log, changed: make(chan struct{})}
}

// add queues c and returns at once.
func (q *confirmer) add(c confirm) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.added++
	if len(q.queued) >= maxConfirmsQueued {
		q.ended++
		q.log.Warn("confirm queue full: the reconcile job confirms the reservation", "order", c.no)
		return
	}
	q.queued = append(q.queued, c)
	if !q.sending {
		q.sending = true
		go q.run()
	}
}

// run sends what is queued, an exchange at a time, until nothing is.
func (q *confirmer) run() {
	for {
		q.mu.Lock()
		n := min(len(q.queued), maxConfirmBatch)
		if n == 0 {
			q.sending = false
			q.mu.Unlock()
			return
		}
		batch := q.queued[:n:n]
		q.queued = append([]confirm(nil), q.queued[n:]...)
		q.mu.Unlock()

		q.send(batch)

		q.mu.Lock()
		q.ended += uint64(n)
		close(q.changed)
		q.changed = make(chan struct{})
		q.mu.Unlock()
	}
}

// send forgets batch's reservations in one pipeline, one HDEL per pending
// hash (an item's keys share a Cluster slot, so each HDEL has one).
func (q *confirmer) send(batch []confirm) {
	byHash := map[string][]string{}
	var order []string
	for _, c := range batch {
		if _, ok := byHash[c.pending]; !ok {
			order = append(order, c.pending)
		}
		byHash[c.pending] = append(byHash[c.pending], c.no)
	}
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, h := range order {
			p.HDel(ctx, h, byHash[h]...)
		}
		return nil
	})
	if err != nil {
		// The orders are committed; the reconcile job confirms the
		// reservations it finds stale.
		q.log.Warn("confirming reservations failed", "confirms", len(batch), "err", err)
	}
}

// flush waits until every confirm queued before it was called has been
// sent (or has failed), or until ctx ends.
func (q *confirmer) flush(ctx context.Context) error {
	q.mu.Lock()
	target := q.added
	for q.ended < target {
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
	return nil
}
