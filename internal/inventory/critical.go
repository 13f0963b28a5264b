package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Guard is what a lock stage wraps around the critical section.
type Guard interface {
	// Enter blocks until the caller may run the critical section for key,
	// or fails with ErrLockTimeout, ErrUnavailable or the context's error.
	// A non-zero by bounds the wait; zero leaves the bound to the guard.
	Enter(ctx context.Context, key string, by time.Time) (Held, error)
}

// Held is a guard that is held.
type Held interface {
	// Token is the fencing token of this hold; 0 when the guard has none.
	Token() int64
	// Context returns the context the critical section runs under, given
	// the request's: for a lease, one that also ends when the lease is lost,
	// so a holder that lost its lock stops working.
	Context(ctx context.Context) context.Context
	// Err is nil while the guard is held and ErrLockLost once it is not.
	Err() error
	// Exit gives the guard up.
	Exit(ctx context.Context) error
}

// SectionOptions tune the shared critical section.
type SectionOptions struct {
	// Delay is slept between reading and writing the stock, so that a
	// workshop can see the race (SECKILL_CRITICAL_SECTION_DELAY).
	Delay time.Duration
	// Fencing makes the stock write carry the guard's token, so that a
	// holder that lost its lock writes nothing (SECKILL_FENCING).
	Fencing bool
	// BetweenReadAndWrite, when set, is called where Delay is slept. Tests
	// use it to force interleavings (a barrier) or a pause past the TTL.
	BetweenReadAndWrite func(ctx context.Context, o Order)
	// BeforeWrite, when set, is called after the last check that the guard
	// is still held, just before the write: the pause no check can see,
	// which only the fencing token stops. Tests use it.
	BeforeWrite func(o Order)
	// Logger receives failures to give the guard up after the write.
	Logger *slog.Logger
}

// guarded is the naive read-check-write sale under a Guard. It is the same
// code for every lock stage; only the guard changes.
type guarded struct {
	guard Guard
	store SectionStore
	opts  SectionOptions
	kind  string // lock key prefix: "product" or "coupon"
	// queue, for the lock stages, lines a crowd up in front of the lock
	// (queue.go); the teaching stages go straight to their guard.
	queue *lockQueue
}

// NewGuarded returns the shared critical section under guard. kind names the
// item kind in lock keys ("product", "coupon").
func NewGuarded(guard Guard, store SectionStore, kind string, opts SectionOptions) Stage {
	return newGuarded(guard, store, kind, opts, nil)
}

func newGuarded(guard Guard, store SectionStore, kind string, opts SectionOptions, queue *lockQueue) *guarded {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &guarded{guard: guard, store: store, opts: opts, kind: kind, queue: queue}
}

func (g *guarded) Buy(ctx context.Context, o Order) error {
	_, err := g.BuyLast(ctx, o)
	return err
}

// BuyLast is Buy that also says when the buy took the item's last unit
// (LastUnitSeller): the crowd control in front then answers the next
// buyers sold out without a turn at the lock.
func (g *guarded) BuyLast(ctx context.Context, o Order) (soldOut error, err error) {
	// The sale window first, on the database's clock and before the lock:
	// a crowd that came early takes no lock and no turn (window.go).
	win, err := CheckWindow(ctx, g.store, o.ItemID)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%s:%d", g.kind, o.ItemID)
	var by time.Time // when to stop waiting for the guard; zero: no bound
	leave := func() {}
	if g.queue != nil {
		if by, leave, err = g.queue.join(ctx, o, key); err != nil {
			if errors.Is(err, ErrSoldOut) {
				return nil, SoldOutAt(win, err)
			}
			return nil, err
		}
		defer leave()
	}
	held, err := g.guard.Enter(ctx, key, by)
	if err != nil {
		return nil, err
	}
	// The turn in the queue ends with the hold, lost or given up: a holder
	// stuck past its lease must not keep this instance's next buyer from
	// the lock.
	defer context.AfterFunc(held.Context(ctx), leave)()
	// unsettled, once set, is a write that may still land after Buy
	// returns (see Unsettled): the guard is given up only after it has.
	var unsettled <-chan struct{}
	defer func() {
		if unsettled != nil {
			go g.exitWhenSettled(context.WithoutCancel(ctx), held, unsettled, o)
			return
		}
		// Exit even when the request was cancelled. A failed exit after a
		// committed write does not undo the order, so it is logged, not
		// returned: the buyer did get the order. An exit still under way
		// at the buyer's end (a Redis that stopped answering) goes on in
		// the background: the buyer is answered by its deadline.
		failed := func(xerr error) {
			if xerr != nil {
				g.opts.Logger.Warn("giving up the guard failed after the write", "item", o.ItemID, "err", xerr)
			}
		}
		xerr := Within(ctx, func() error { return held.Exit(context.WithoutCancel(ctx)) }, failed)
		switch {
		case xerr == nil || errors.Is(xerr, ErrStillUnderWay):
		case err != nil:
			err = errors.Join(err, xerr)
		default:
			failed(xerr)
		}
	}()

	// The section runs under the hold's context: a lease that is lost
	// cancels the work in flight, so its holder stops instead of writing
	// late. The fencing token stays the backstop for what a cancel cannot
	// reach (a write already on the wire when the lease ran out).
	token := int64(0)
	if g.opts.Fencing {
		token = held.Token()
	}
	left, unsettled, err := g.readCheckWrite(held.Context(ctx), held, o, win, token)
	if err == nil && left == 0 {
		return SoldOutAt(win, ErrSoldOut), nil // the next buyer would read 0
	}
	return nil, err
}

// readCheckWrite is the lesson of the lock stages: read the stock, check
// that it covers the order, write back the stock computed from the read.
// It is only as safe as the guard held around it. It returns the units
// left, or, for a write that may still land (see Unsettled), the channel
// that closes when it has.
func (g *guarded) readCheckWrite(ctx context.Context, held Held, o Order, win WindowAt, token int64) (left int, unsettled <-chan struct{}, err error) {
	// With a token, the read claims the row first (see read).
	stock, err := g.read(ctx, o.ItemID, token)
	if err != nil {
		return 0, nil, lostOr(held, err)
	}
	if stock < o.Quantity {
		return 0, nil, SoldOutAt(win, ErrSoldOut)
	}
	if err := g.pause(ctx, o); err != nil { // where a workshop sees the race
		return 0, nil, lostOr(held, err)
	}
	// Check the lock just before the write: a holder that was paused past
	// its lease learns it here rather than from the fence.
	if err := held.Err(); err != nil {
		return 0, nil, err
	}
	if g.opts.BeforeWrite != nil {
		g.opts.BeforeWrite(o)
	}
	// The lost update lives here: stock-o.Quantity was computed from a read
	// that another buyer may have acted on too. The CHECK (stock >= 0)
	// constraint cannot see it, since the value written is never negative.
	if err := g.store.WriteComputed(ctx, o, stock-o.Quantity, token); err != nil {
		return 0, settling(err), writeFailed(held, err)
	}
	return stock - o.Quantity, nil, nil
}

// exitWhenSettled gives the guard up once the write that was still on its
// way when its buyer stopped waiting has landed or failed. Until then the
// next buyer waits for the guard (within its own deadline) instead of
// reading the stock the late write is about to change: without a fencing
// token nothing else stops its write from following the late one, and two
// sales would count one unit (TestCommitInFlightKeepsTheGuard). On MySQL
// the write settles when its transaction has ended on the server
// (Ledger.WriteComputed): until then it holds the item's row, so no other
// write of the item's stock could land meanwhile anyway.
func (g *guarded) exitWhenSettled(ctx context.Context, held Held, settled <-chan struct{}, o Order) {
	<-settled
	if err := held.Exit(ctx); err != nil {
		g.opts.Logger.Warn("giving up the guard failed after a late write settled", "item", o.ItemID, "err", err)
	}
}

// read reads the stock under the guard, having claimed the row first when
// token > 0: in one round trip when the store can (FenceReader). Fencing
// only the final write is not enough: a holder whose lease ran out could
// still write between a newer holder's read and that holder's write, and
// the newer write would then silently overwrite it.
func (g *guarded) read(ctx context.Context, id, token int64) (int, error) {
	if token <= 0 {
		return g.store.ReadStock(ctx, id)
	}
	if fr, ok := g.store.(FenceReader); ok {
		return fr.FenceAndRead(ctx, id, token)
	}
	if err := g.store.Fence(ctx, id, token); err != nil {
		return 0, err
	}
	return g.store.ReadStock(ctx, id)
}

// lostOr explains a failed step by a lost lock when the lock was lost (the
// step was then most likely cancelled by it), else returns err.
func lostOr(held Held, err error) error {
	if err == nil {
		return nil
	}
	if lerr := held.Err(); lerr != nil {
		return errors.Join(lerr, err)
	}
	return err
}

// writeFailed explains a failed write. A write cut off when the lock was
// lost may still land: on MySQL it is one batch, which the server runs to
// its end after the client hung up, and a fenced write that no newer
// holder overtook commits (validly). Its buyer must hear that the outcome
// is unknown, never "lock lost, nothing was written"
// (TestWriteCutOffByALostLockIsNotNothing).
func writeFailed(held Held, err error) error {
	cut := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrOutcomeUnknown)
	if lerr := held.Err(); lerr != nil && cut {
		// Neither error is wrapped: the answer must be the unknown outcome's.
		return fmt.Errorf("%w: the write was on its way when the lock was lost (%v; %v)", ErrOutcomeUnknown, lerr, err)
	}
	return lostOr(held, err)
}

func (g *guarded) pause(ctx context.Context, o Order) error {
	if g.opts.BetweenReadAndWrite != nil {
		g.opts.BetweenReadAndWrite(ctx, o)
	}
	if g.opts.Delay <= 0 {
		return nil
	}
	return sleep(ctx, g.opts.Delay)
}

// sleep waits d, or returns ctx's error if it ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
