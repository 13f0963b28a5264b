package inventory

import (
	"context"
	"errors"
	"time"
)

// PastTheBuyer is how long past its request's end a buyer still waits for
// the bookkeeping of its buy that runs apart from the request's
// cancellation (a lock's release, a reservation's give-back or confirm):
// many times a round trip to a backend that answers, far less than the
// seconds such a step may take on one that does not.
const PastTheBuyer = 250 * time.Millisecond

// ErrStillUnderWay is Within's error for a step that outlived its buyer.
var ErrStillUnderWay = errors.New("still under way at the buyer's end (it goes on in the background)")

// Within runs step and waits for it until it ends, or until ctx (the
// buyer's) is done and PastTheBuyer more has passed: then it returns
// ErrStillUnderWay, and step goes on in the background within its own
// budget, late hearing its error. A buy's answer is bounded by its
// deadline, and a backend that stopped answering must not hold it for a
// step's budget too.
func Within(ctx context.Context, step func() error, late func(error)) error {
	done := make(chan error, 1)
	go func() { done <- step() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(PastTheBuyer)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		go func() { late(<-done) }()
		return ErrStillUnderWay
	}
}
