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
	Enter(ctx context.Context, key string) (Held, error)
}

// Held is a guard that is held.
type Held interface {
	// Token is the fencing token of this hold; 0 when the guard has none.
	Token() int64
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
	// Logger receives failures to give the guard up after the write.
	Logger *slog.Logger
}

// guarded is the naive read-check-write sale under a Guard. It is the same
// code for every lock stage; only the guard changes.
type guarded struct {
	guard Guard
	store Store
	opts  SectionOptions
	kind  string // lock key prefix: "product" or "coupon"
}

// NewGuarded returns the shared critical section under guard. kind names the
// item kind in lock keys ("product", "coupon").
func NewGuarded(guard Guard, store Store, kind string, opts SectionOptions) Stage {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &guarded{guard: guard, store: store, opts: opts, kind: kind}
}

func (g *guarded) Buy(ctx context.Context, o Order) (err error) {
	held, err := g.guard.Enter(ctx, fmt.Sprintf("%s:%d", g.kind, o.ItemID))
	if err != nil {
		return err
	}
	defer func() {
		// Exit even when the request was cancelled. A failed exit after a
		// committed write does not undo the order, so it is logged, not
		// returned: the buyer did get the order.
		if xerr := held.Exit(context.WithoutCancel(ctx)); xerr != nil {
			if err != nil {
				err = errors.Join(err, xerr)
				return
			}
			g.opts.Logger.Warn("giving up the guard failed after the write", "item", o.ItemID, "err", xerr)
		}
	}()

	token := int64(0)
	if g.opts.Fencing {
		token = held.Token()
	}
	if token > 0 {
		// Claim the row with our token before reading it. Fencing only the
		// final write is not enough: a holder whose lease ran out could
		// still write between a newer holder's read and that holder's
		// write, and the newer write would then silently overwrite it.
		if err := g.store.Fence(ctx, o.ItemID, token); err != nil {
			return err
		}
	}
	stock, err := g.store.ReadStock(ctx, o.ItemID)
	if err != nil {
		return err
	}
	if stock < o.Quantity {
		return ErrSoldOut
	}
	if err := g.pause(ctx, o); err != nil {
		return err
	}
	// The lost update lives here: stock-o.Quantity was computed from a read
	// that another buyer may have acted on too. The CHECK (stock >= 0)
	// constraint cannot see it, since the value written is never negative.
	return g.store.WriteComputed(ctx, o, stock-o.Quantity, token)
}

func (g *guarded) pause(ctx context.Context, o Order) error {
	if g.opts.BetweenReadAndWrite != nil {
		g.opts.BetweenReadAndWrite(ctx, o)
	}
	if g.opts.Delay <= 0 {
		return nil
	}
	t := time.NewTimer(g.opts.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
