package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A sale window: an item may open at a set instant and close at another.
//
// Instances' clocks disagree, and one that runs two seconds fast must not
// sell two seconds early. So no stage asks its instance what time it is:
// the window is checked against a reference clock, once, at the buy, by
// whoever decides the buy. The SQL stages ask the database (the guarded
// UPDATE of db-atomic compares with the database's own now; the lock
// stages read the window against it before they queue for the lock), and
// the Redis stages ask Redis (TIME inside the script that takes the
// units). Writes that follow a buy (redis-atomic's group commit,
// redis-stream's writers) do not check again: the buy was in the window
// when it was decided.
//
// An instance may still answer from memory (admission/crowd.go), but only with what
// a reference clock told it, aged by its own monotonic clock: never by its
// wall clock, and only to refuse, never to sell.

// Sentinel errors of the window. A buy before the opening fails with a
// *NotOpen, which wraps ErrSaleNotOpen.
var (
	ErrSaleNotOpen = errors.New("sale not open yet")
	ErrSaleClosed  = errors.New("sale closed")
)

// SaleWindow is when an item is on sale: from OpensAt (inclusive) to
// ClosesAt (exclusive). A zero time means no bound on that side; the zero
// SaleWindow is always open, as the seed data is.
type SaleWindow struct {
	OpensAt  time.Time
	ClosesAt time.Time
}

// Validate checks that the window closes after it opens.
func (w SaleWindow) Validate() error {
	if !w.OpensAt.IsZero() && !w.ClosesAt.IsZero() && !w.ClosesAt.After(w.OpensAt) {
		return fmt.Errorf("%w: closes_at must be after opens_at", ErrInvalid)
	}
	return nil
}

// NotOpen is the error of a buy before the opening. It wraps
// ErrSaleNotOpen.
type NotOpen struct {
	ItemID int64
	// Wait is the time left until the opening by the reference clock, or
	// a lower bound of it when answered from memory.
	Wait time.Duration
}

func (e *NotOpen) Error() string {
	return fmt.Sprintf("%v: item %d opens in %v", ErrSaleNotOpen, e.ItemID, e.Wait.Round(time.Millisecond))
}

func (e *NotOpen) Unwrap() error { return ErrSaleNotOpen }

// RetryAfter is the wait the answer's Retry-After reports.
func (e *NotOpen) RetryAfter() time.Duration { return e.Wait }

// closesIn marks a sell-out of an item whose window closes: the time that
// was left until the closing, by the reference clock, when the stage found
// the item sold out. The sold-out memory trusts its mark only that long
// (admission/crowd.go): after the closing the answer is "closed", not "sold out".
type closesIn time.Duration

func (c closesIn) Error() string {
	return fmt.Sprintf("the sale closes in %v", time.Duration(c).Round(time.Millisecond))
}

// ClosesIn returns the time left until the closing that err, a sell-out,
// is marked with (see SoldOutAt), if any.
func ClosesIn(err error) (time.Duration, bool) {
	var left closesIn
	if errors.As(err, &left) {
		return time.Duration(left), true
	}
	return 0, false
}

// RefGrain bounds the error of the stages' reference clocks: the scripts
// read Redis's TIME in whole milliseconds, and SQLite's 'now' has no finer
// grain, with its time left worked out from floating-point day numbers
// (julianday, about 50 µs off at most). A clock that reads a moment early
// reports the time left until the closing (or the opening) that much too
// long, so what is learnt from it is trusted that much less: never past
// the real moment.
const RefGrain = 2 * time.Millisecond

// WindowAt is an item's window as a reference clock saw it at one moment:
// how far the opening and the closing were from that clock's now.
type WindowAt struct {
	Opens, Closes     bool          // whether the window has that bound
	OpensIn, ClosesIn time.Duration // from the reference now to the bound
}

// Err returns the answer to a buy at that moment: a *NotOpen before the
// opening, ErrSaleClosed from the closing on, nil in between.
func (w WindowAt) Err(id int64) error {
	switch {
	case w.Opens && w.OpensIn > 0:
		return &NotOpen{ItemID: id, Wait: w.OpensIn}
	case w.Closes && w.ClosesIn <= 0:
		return fmt.Errorf("item %d: %w", id, ErrSaleClosed)
	}
	return nil
}

// SoldOutAt is err, a sell-out found at the moment w was read, marked
// with the time left until the closing when the window closes: the
// sold-out memory trusts it no longer than that (admission/crowd.go).
func SoldOutAt(w WindowAt, err error) error {
	if w.Closes {
		return fmt.Errorf("%w (%w)", err, closesIn(w.ClosesIn))
	}
	return err
}

// WindowReader is a store that reads an item's window against the
// database's clock (the lock stages' check).
type WindowReader interface {
	// WindowAt returns the item's window as the database's clock sees it
	// now, or ErrNotFound.
	WindowAt(ctx context.Context, id int64) (WindowAt, error)
}

// WindowDeducter is a store whose guarded decrement can also check the
// window against the database's clock, in the same statement (db-atomic).
type WindowDeducter interface {
	// DeductInWindow is Deduct that also fails with a *NotOpen or
	// ErrSaleClosed when the database's now is outside the item's window.
	DeductInWindow(ctx context.Context, o Order) error
}

// WindowSetter is a catalog that keeps sale windows.
type WindowSetter interface {
	// ResetSale is Reset that also sets the item's window (the zero
	// window: always open).
	ResetSale(ctx context.Context, id int64, n int, w SaleWindow) error
}

// Clock is a catalog that can tell its reference time: the database's
// clock, which the SQL stages check windows against.
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// ServerTime is the reference time shown beside an item's window, so that
// a page can count down: the catalog's clock (the database's), or this
// process's when the catalog has none. The Redis stages decide by Redis's
// clock, which runs on the same machine here; apart, keep both on NTP.
func (s *Service) ServerTime(ctx context.Context) (time.Time, error) {
	if c, ok := s.store.(Clock); ok {
		return c.Now(ctx)
	}
	return time.Now().UTC(), nil
}

// checkWindow is the lock stages' check, and redis-sharded's: the window
// against the database's clock, before the buyer queues for the lock (or
// takes a unit from a bucket), so a crowd that came early costs one read
// each and takes no lock. A store that keeps no windows has none to check.
func CheckWindow(ctx context.Context, store any, id int64) (WindowAt, error) {
	wr, ok := store.(WindowReader)
	if !ok {
		return WindowAt{}, nil
	}
	w, err := wr.WindowAt(ctx, id)
	if err != nil {
		return w, err
	}
	return w, w.Err(id)
}

// WindowClock is a stage that checks the sale window by a clock of its own
// rather than the catalog's: the Redis stages read Redis's TIME in the
// script that takes the units. The opening draw reads the same clock for
// the stage's buyers.
type WindowClock interface {
	// WindowNow reads the clock the stage checks item id's window
	// against: on a Redis Cluster, the clock of the node that holds the
	// item.
	WindowNow(ctx context.Context, id int64) (time.Time, error)
}
