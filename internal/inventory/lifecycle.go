package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// What becomes of an order after the buy.
//
//	pending ──written──▶ confirmed ──paid in time──▶ paid
//	   │                     │
//	   └─cannot be written─▶ failed   └─not paid in time─▶ cancelled (units back in stock)
//
// Only redis-stream has pending orders: it answers as soon as Redis took
// the units, and a writer puts the order in the database later. The other
// stages write the order before they answer, so their orders start
// confirmed. Every change of status is a conditional UPDATE on the order's
// row (WHERE status = ...): when two instances race to pay and to cancel,
// or two payment-timeout jobs race to cancel, the database lets one win,
// and the units come back once.
const (
	StatusPending   = "pending"   // accepted, not yet written (redis-stream)
	StatusConfirmed = "confirmed" // written: the units left the stock
	StatusPaid      = "paid"      // paid within the payment window
	StatusCancelled = "cancelled" // not paid in time: the units are back in stock
	StatusFailed    = "failed"    // accepted but never written: the units went back
)

// Sentinel errors of the order lifecycle.
var (
	ErrOrderNotFound  = errors.New("order not found")
	ErrOrderPending   = errors.New("order accepted but not written yet")
	ErrOrderCancelled = errors.New("order cancelled")
	ErrOrderFailed    = errors.New("order failed")
)

// Owed is a cancelled order whose units are owed to generation Gen of the
// Redis copy of the stock: the database has them back, the copy not yet.
type Owed struct {
	Order
	Gen string
}

// PaymentBook is what the payment lifecycle needs from the store. The
// store package's Ledger has it; for coupon batches, which are free, Pay
// fails with ErrInvalid and there is never anything to cancel.
type PaymentBook interface {
	// Pay marks a confirmed order created at or after since as paid and
	// returns it; a paid order is returned as it is. It fails with
	// ErrOrderNotFound, ErrOrderCancelled (also when the window closed
	// before the job got to it) or ErrOrderFailed.
	Pay(ctx context.Context, no string, since time.Time) (Order, error)
	// Unpaid lists up to limit confirmed orders created before cutoff.
	Unpaid(ctx context.Context, cutoff time.Time, limit int) ([]Order, error)
	// Cancel cancels o, if still confirmed and created before cutoff, and
	// returns its units to the stock, in one transaction; false when it
	// was not (paid, or cancelled by another run). gen, unless "", records
	// the units as owed to that generation of the Redis copy.
	Cancel(ctx context.Context, o Order, cutoff time.Time, gen string) (bool, error)
	// Owed lists up to limit cancelled orders whose units the Redis copy
	// has not got back.
	Owed(ctx context.Context, limit int) ([]Owed, error)
	// ClearOwed records that the units of order no are no longer owed to
	// generation gen.
	ClearOwed(ctx context.Context, no, gen string) error
}

// StockCopy is the Redis copy of the stock the Redis stages sell from
// (package redisstage), as the payment timeout returns units to it.
type StockCopy interface {
	// BeginCancel marks order no of item id as being cancelled and
	// returns the generation of the copy the units are owed to.
	BeginCancel(ctx context.Context, id int64, no string) (string, error)
	// EndCancel drops the mark BeginCancel set.
	EndCancel(ctx context.Context, id int64, no string) error
	// ReturnUnits gives o's units back to generation gen of the copy, once;
	// it reports whether they went back.
	ReturnUnits(ctx context.Context, o Order, gen string) (bool, error)
}

// OrderQueue is redis-stream's queue (package redisstage): the orders
// accepted and not yet written.
type OrderQueue interface {
	// Lookup finds an order accepted and not yet written, or one given up
	// on without a row.
	Lookup(ctx context.Context, no string) (o Order, found bool, err error)
	// Backlog counts the item's orders accepted and not yet written, and
	// their units.
	Backlog(ctx context.Context, id int64) (orders, units int, err error)
	// Drain waits a while until no order of the items is queued; its
	// exchanges with Redis do not grow with the items.
	Drain(ctx context.Context, ids ...int64)
}

// Lifecycle configures what a Service does with its orders after the buy.
type Lifecycle struct {
	// PaymentTimeout is how long a buyer has to pay; an order unpaid for
	// longer is cancelled by CancelUnpaid. 0 means never.
	PaymentTimeout time.Duration
	// RedisStock is the Redis copy of the stock that redis-atomic and
	// redis-stream sell from: units of their cancelled orders go back there
	// too. nil without Redis.
	RedisStock StockCopy
	// Queue is redis-stream, which knows the orders accepted and not yet
	// written. nil without it.
	Queue OrderQueue
	// Now is the clock; time.Now when nil. Tests move it.
	Now func() time.Time
	// AfterCancel, when set, runs after the database committed a
	// cancellation and before the Redis copy gets its units; an error
	// stops the run there, as a crash would. Tests use it.
	AfterCancel func(o Order) error
	// BeforeCancel, when set, runs with the orders a run is about to
	// cancel. Tests use it to line up two racing runs.
	BeforeCancel func(orders []Order)
}

// WithLifecycle sets what s does with orders after the buy. It returns s.
func (s *Service) WithLifecycle(l Lifecycle) *Service {
	if l.Now == nil {
		l.Now = time.Now
	}
	s.life = l
	return s
}

func (s *Service) now() time.Time {
	if s.life.Now == nil {
		return time.Now()
	}
	return s.life.Now()
}

// Order returns the order with this number, in whatever status it is:
// written (confirmed, paid, cancelled, failed) or still queued (pending).
// It fails with ErrOrderNotFound, or ErrUnavailable when Redis, which holds
// the pending ones, cannot be asked.
func (s *Service) Order(ctx context.Context, no string) (Order, error) {
	o, err := s.store.FindOrder(ctx, no)
	if err == nil && o.Status == StatusFailed && s.life.Queue != nil {
		// The row records the fate; Redis remembers why.
		if q, found, qerr := s.life.Queue.Lookup(ctx, no); qerr == nil && found {
			o.Reason = q.Reason
		}
		return o, nil
	}
	if !errors.Is(err, ErrOrderNotFound) || s.life.Queue == nil {
		return o, err
	}
	o, found, err := s.life.Queue.Lookup(ctx, no)
	if err != nil || found {
		return o, err
	}
	// A writer may have written it (and settled it in Redis) between the
	// two looks: the database has it now, or nobody does.
	return s.store.FindOrder(ctx, no)
}

// PayBy is when a confirmed order's payment window closes; zero when
// orders wait for payment forever.
func (s *Service) PayBy(o Order) time.Time {
	if s.life.PaymentTimeout <= 0 {
		return time.Time{}
	}
	return o.CreatedAt.Add(s.life.PaymentTimeout)
}

// Pay marks the order paid and returns it. Paying a paid order again is
// not an error. It fails with ErrOrderNotFound, ErrOrderPending (accepted,
// not yet written: retry shortly), ErrOrderCancelled, ErrOrderFailed, or
// ErrInvalid when the item is free (a coupon grab).
func (s *Service) Pay(ctx context.Context, no string) (Order, error) {
	book, ok := s.store.(PaymentBook)
	if !ok {
		return Order{}, fmt.Errorf("%w: a coupon grab is free: there is nothing to pay", ErrInvalid)
	}
	var since time.Time
	if s.life.PaymentTimeout > 0 {
		since = s.now().Add(-s.life.PaymentTimeout)
	}
	o, err := book.Pay(ctx, no, since)
	if !errors.Is(err, ErrOrderNotFound) || s.life.Queue == nil {
		return o, err
	}
	q, found, qerr := s.life.Queue.Lookup(ctx, no)
	switch {
	case qerr != nil:
		return Order{}, qerr
	case found && q.Status == StatusPending:
		return q, fmt.Errorf("%s: %w", no, ErrOrderPending)
	case found:
		return q, fmt.Errorf("%s (%s): %w", no, q.Reason, ErrOrderFailed)
	}
	// Written between the two looks: pay it now.
	return book.Pay(ctx, no, since)
}

// CancelReport is what one CancelUnpaid run did.
type CancelReport struct {
	Cancelled int     // orders cancelled by this run
	Units     int     // their units, back in the database stock
	Returned  int     // units given back to the Redis copy (also for earlier runs)
	Items     []int64 // items that got units back
}

// cancelBatch bounds the orders one step of a run reads at once.
const cancelBatch = 200

// CancelUnpaid cancels the orders whose payment window has closed and
// returns their units: to the database stock, in the transaction that
// cancels each order, and then to the Redis copy for the orders of the
// stages that sell from it. Then it tells the crowd control, so that no
// instance keeps answering "sold out" from memory.
//
// It is safe to run on several instances at once and to crash anywhere:
// the database lets one run cancel each order; a unit owed to the Redis
// copy is recorded in the same transaction, and given back by a script
// that remembers which orders it gave back, so a run that died before
// that step leaves it to the next one, which does it once. It returns
// what it did, and the errors of the orders it could not settle (they are
// tried again next run).
func (s *Service) CancelUnpaid(ctx context.Context) (CancelReport, error) {
	var rep CancelReport
	book, ok := s.store.(PaymentBook)
	if !ok || s.life.PaymentTimeout <= 0 {
		return rep, nil
	}
	cutoff := s.now().Add(-s.life.PaymentTimeout)
	touched := map[int64]bool{}
	var errs []error
	for ctx.Err() == nil {
		orders, err := book.Unpaid(ctx, cutoff, cancelBatch)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if s.life.BeforeCancel != nil {
			s.life.BeforeCancel(orders)
		}
		skipped := 0
		for _, o := range orders {
			gen, marked := "", false
			if s.life.RedisStock != nil && sellsFromRedisStock(o.Stage) {
				// Read before the cancel commits: a copy reloaded after
				// this read has a new generation, and then the units are
				// not returned to it twice (see return_units.lua). The
				// mark keeps Repair from starting a new generation, from
				// a database read without this cancellation, until it
				// committed (see begin_cancel.lua).
				if gen, err = s.life.RedisStock.BeginCancel(ctx, o.ItemID, o.No); err != nil {
					errs = append(errs, err)
					skipped++
					continue
				}
				marked = true
			}
			done, err := book.Cancel(ctx, o, cutoff, gen)
			if marked {
				if uerr := s.life.RedisStock.EndCancel(ctx, o.ItemID, o.No); uerr != nil {
					errs = append(errs, uerr) // the mark expires by itself
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("cancel %s: %w", o.No, err))
				skipped++
				continue
			}
			if !done {
				continue // paid meanwhile, or another run cancelled it
			}
			rep.Cancelled++
			rep.Units += o.Quantity
			touched[o.ItemID] = true
			if s.onBuy != nil {
				// The database's stock changed, whether or not the units
				// reach the Redis copy: the reconcile job checks the item
				// in full at its next run, as after a buy (OnBuy).
				s.onBuy(o.ItemID)
			}
			if s.life.AfterCancel != nil {
				if err := s.life.AfterCancel(o); err != nil {
					return rep, err
				}
			}
		}
		if len(orders) < cancelBatch || skipped == len(orders) {
			break
		}
	}
	if s.life.RedisStock != nil {
		n, items, err := s.returnOwed(ctx, book)
		rep.Returned += n
		for _, id := range items {
			touched[id] = true
			if s.onBuy != nil {
				s.onBuy(id) // units came back to the copy: checked in full
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	for id := range touched {
		rep.Items = append(rep.Items, id)
		if s.crowd != nil {
			if err := s.crowd.Restocked(ctx, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return rep, errors.Join(errs...)
}

// returnOwed gives the Redis copy the units that cancelled orders owe it,
// whichever run cancelled them.
func (s *Service) returnOwed(ctx context.Context, book PaymentBook) (units int, items []int64, err error) {
	owed, err := book.Owed(ctx, cancelBatch)
	if err != nil {
		return 0, nil, err
	}
	var errs []error
	for _, w := range owed {
		back, err := s.life.RedisStock.ReturnUnits(ctx, w.Order, w.Gen)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := book.ClearOwed(ctx, w.No, w.Gen); err != nil {
			// The script remembers the return: the next run only clears.
			errs = append(errs, err)
		}
		if back {
			units += w.Quantity
			items = append(items, w.ItemID)
		}
	}
	return units, items, errors.Join(errs...)
}

// sellsFromRedisStock reports whether a stage takes its units from the
// Redis copy of the stock, so that a cancellation owes them back there.
func sellsFromRedisStock(stage string) bool {
	return stage == StageRedisAtomic || stage == StageRedisStream
}
