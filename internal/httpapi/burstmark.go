package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// This file keeps one burst per item in flight across the fleet. Two
// bursts of one item at once (two `seckill story` runs, or a story and the
// dashboard) mix their buyers, and a reset in the middle of one empties
// the stock under it: each then reports numbers that are neither's, and
// nothing says so. The burst marks its item in the shared database before
// it fires, on whichever instance it runs; a second burst, or a reset, of
// the item finds the mark and is refused with 409 burst-in-progress.

// errBurstInProgress refuses a burst or a reset of an item whose burst is
// in flight somewhere in the fleet. Nothing was fired or written.
var errBurstInProgress = errors.New("a burst of this item is in flight")

// BurstMarks are the fleet-wide marks of bursts in flight. *store.Bursts
// implements them; the times are the caller's (see there).
type BurstMarks interface {
	// Mark marks the item under token until until, or reports false when
	// another burst's mark has not lapsed by now.
	Mark(ctx context.Context, kind string, itemID int64, token string, now, until time.Time) (bool, error)
	// Extend moves the lapse of the mark under token to until, or reports
	// false when the mark is no longer token's.
	Extend(ctx context.Context, kind string, itemID int64, token string, until time.Time) (bool, error)
	// Unmark removes the mark if it is still token's.
	Unmark(ctx context.Context, kind string, itemID int64, token string) error
	// MarkedAny reports whether a mark of any of the items has not
	// lapsed by now, and one such item, in a bounded number of round
	// trips however many items there are.
	MarkedAny(ctx context.Context, kind string, itemIDs []int64, now time.Time) (itemID int64, marked bool, err error)
}

// burstMarkLife is how long a mark outlives its last extension. A running
// burst extends it every third of that, so a mark lapses only when its
// instance stopped extending it: it died, or lost the database for that
// long. Then the item is free again within burstMarkLife.
const burstMarkLife = 30 * time.Second

// markBurst marks the item's burst in flight and keeps the mark alive
// until the returned end is called. It returns errBurstInProgress when
// another burst holds the item, or the database's error. A nil marks marks
// nothing.
func markBurst(ctx context.Context, marks BurstMarks, log *slog.Logger, kind string, itemID int64) (end func(), err error) {
	if marks == nil {
		return func() {}, nil
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	token := hex.EncodeToString(b[:])
	now := time.Now()
	ok, err := marks.Mark(ctx, kind, itemID, token, now, now.Add(burstMarkLife))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errBurstInProgress
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(burstMarkLife / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), burstMarkLife/3)
			ok, err := marks.Extend(ctx, kind, itemID, token, time.Now().Add(burstMarkLife))
			cancel()
			switch {
			case err != nil:
				log.Warn("extending the burst's mark failed; it lapses unless a later try succeeds", "kind", kind, "item", itemID, "err", err)
			case !ok:
				log.Warn("the burst's mark lapsed: another burst or a reset of the item may run beside it", "kind", kind, "item", itemID)
				return
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped
		// Also when the caller has left: the mark must not hold the item
		// for burstMarkLife after the burst is over.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := marks.Unmark(ctx, kind, itemID, token); err != nil {
			log.Warn("removing the burst's mark failed; it lapses by itself", "kind", kind, "item", itemID, "err", err, "lapses_in", burstMarkLife)
		}
	}, nil
}

// checkNoBurst returns errBurstInProgress, naming the item, when a burst
// of any of the items is in flight, or the database's error. All the items
// are asked about together: a session of 1,000 asked one by one spent half
// its request deadline before its commit. A nil marks checks nothing.
func checkNoBurst(ctx context.Context, marks BurstMarks, kind string, itemIDs ...int64) error {
	if marks == nil {
		return nil
	}
	id, busy, err := marks.MarkedAny(ctx, kind, itemIDs, time.Now())
	if err != nil {
		return err
	}
	if busy {
		return fmt.Errorf("%w: %s %d", errBurstInProgress, kind, id)
	}
	return nil
}
