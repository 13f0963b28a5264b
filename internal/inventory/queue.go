package inventory

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// lockQueue is what the lock stages (redis-lock, redlock) put in front of
// their lock when a crowd arrives. Without it, every buyer of a hot item,
// including the many who will only hear "sold out", asks the lock service
// at once: a burst of hundreds turns into hundreds of contenders per
// handoff, and the lock spends its time turning them away.
//
//   - A buyer first reads the stock: once the item is sold out, the crowd
//     is answered without queuing at all.
//   - Buyers of one instance then take turns in-process (the per-item
//     mutex of local-mutex, used here only as a queue), so at most one per
//     instance asks the lock at a time.
//   - With its turn, a buyer reads the stock again: those who queued before
//     the last unit went learn it here, not after a handoff of the lock.
//
// None of this decides a sale. The read under the lock, and the fencing
// token at the write, still do; these reads are only early answers.
//
// With a fair lock (redis-lock with SECKILL_LOCK_FAIR) there are no turns:
// the lock's own line in Redis is first come, first served across the
// fleet, and a buyer must take its place there on arrival. Behind an
// instance's turn it would join that line only once the buyers ahead of it
// on its instance were done, after buyers of other instances who came
// later.
type lockQueue struct {
	store    SectionStore
	turns    mutexGuard
	turnless bool          // the lock keeps the line itself (fair)
	wait     time.Duration // one bound for the turn and the lock together
}

func newLockQueue(store SectionStore, wait time.Duration) *lockQueue {
	return &lockQueue{store: store, wait: wait}
}

// join lines the buyer up for the lock on key. It returns when to stop
// waiting for the lock, and leave, which gives the turn to the next buyer
// (it may be called more than once). It fails with ErrSoldOut,
// ErrLockTimeout or the context's error.
func (q *lockQueue) join(ctx context.Context, o Order, key string) (by time.Time, leave func(), err error) {
	if err := q.available(ctx, o); err != nil {
		return by, nil, err
	}
	by = time.Now().Add(q.wait)
	if q.turnless {
		return by, func() {}, nil
	}
	turn, err := q.turns.Enter(ctx, key, by)
	if err != nil {
		return by, nil, err
	}
	leave = sync.OnceFunc(func() { _ = turn.Exit(ctx) }) // never fails
	if err := q.available(ctx, o); err != nil {
		leave()
		return by, nil, err
	}
	return by, leave, nil
}

// available reads the stock: an early answer, never the one that decides.
func (q *lockQueue) available(ctx context.Context, o Order) error {
	stock, err := q.store.ReadStock(ctx, o.ItemID)
	if err != nil {
		return err
	}
	if stock < o.Quantity {
		return fmt.Errorf("%w (read before the lock)", ErrSoldOut)
	}
	return nil
}
