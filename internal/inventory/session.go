package inventory

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A session (场次) opens many sales together: each item with its stock,
// all under one window. It is the bulk form of ResetSale: one transaction
// for every item, and one wait for the sold-out memory's lease, not one
// per item (a reset waits it out so that no instance answers the item sold
// out from memory once the reset has answered).

// MaxSessionItems bounds the items of one session.
const MaxSessionItems = 1000

// SessionItem is one item of a session and its new stock.
type SessionItem struct {
	ID    int64
	Stock int
}

// SessionStore is a catalog that resets many items in one transaction.
type SessionStore interface {
	// ResetSession is ResetSale of every item, all or none: an unknown
	// item fails it with ErrNotFound and nothing is written.
	ResetSession(ctx context.Context, items []SessionItem, w SaleWindow) error
}

// ValidateSession checks a session's items and window, naming the first
// bad field; it returns ErrInvalid.
func ValidateSession(items []SessionItem, w SaleWindow) error {
	if len(items) == 0 || len(items) > MaxSessionItems {
		return fmt.Errorf("%w: items must hold 1 to %d items (it has %d)", ErrInvalid, MaxSessionItems, len(items))
	}
	if err := w.Validate(); err != nil {
		return err
	}
	seen := make(map[int64]bool, len(items))
	for i, it := range items {
		switch {
		case it.ID <= 0:
			return fmt.Errorf("%w: items[%d].id must be a positive integer", ErrInvalid, i)
		case seen[it.ID]:
			return fmt.Errorf("%w: items[%d].id %d is in the session twice", ErrInvalid, i, it.ID)
		}
		seen[it.ID] = true
		if err := validStock(fmt.Sprintf("items[%d].stock", i), it.Stock); err != nil {
			return err
		}
	}
	return nil
}

// ScheduleSession deletes the orders of every item of the session and
// restocks each with its stock, on sale in window w (the zero window: at
// once and for good), in one transaction. It returns once every instance
// sells them, having waited out the sold-out memory's lease once. It
// returns ErrInvalid (nothing written) for a bad session, ErrNotFound
// (nothing written) when an item does not exist.
func (s *Service) ScheduleSession(ctx context.Context, items []SessionItem, w SaleWindow) error {
	if err := ValidateSession(items, w); err != nil {
		return err
	}
	cs, err := s.catalogue()
	if err != nil {
		return err
	}
	ids := make([]int64, len(items))
	stock := make(map[int64]int, len(items))
	for i, it := range items {
		ids[i], stock[it.ID] = it.ID, it.Stock
	}
	if s.life.Queue != nil {
		// All items in one wait: item by item, a 1,000-item session spent
		// half its request deadline on round trips before its commit.
		s.life.Queue.Drain(ctx, ids...)
	}
	if err := cs.ResetSession(ctx, items, w); err != nil {
		return err
	}
	return s.restocked(ctx, ids, func(ctx context.Context, r Resetter, id int64) error { return r.Reset(ctx, id, stock[id]) })
}

// reloadersPerSession bounds the items whose copies a session reloads at
// once: each reload is a round trip or more per stage, and 1,000 of them
// one after another took most of a request's deadline.
const reloadersPerSession = 16

// reloadWait bounds the reloads and reset hooks that run past a reset's
// commit (restocked), when the request's own deadline is sooner: a
// 1,000-item session takes about 2 s. They must end: a copy's reload reads
// the item and its buyers from MySQL, and a read with no deadline waits as
// long as MySQL stays silent (the DSN sets no read timeout), with the
// admin unanswered and the goroutine held for good.
const reloadWait = 10 * time.Second

// restocked tells the stages that keep a copy (reset) and then the reset
// hooks that the items' new stock is in place, as ResetSale does for one:
// the items side by side (at most reloadersPerSession at once), each
// item's stages in order. The store has committed the new stock by then,
// so the caller's end (its deadline, its client leaving) does not cut the
// reloads short: an item left out would sell its old stock in its old
// window from its copy. reset is handed a context that is not cancelled
// with ctx, and ends at ctx's deadline or reloadWait from now, whichever
// is later (TestReloadsPastTheCommitStillEnd). Any failure is returned
// as ErrRestockIncomplete: the new stock is committed.
func (s *Service) restocked(ctx context.Context, ids []int64, reset func(context.Context, Resetter, int64) error) error {
	deadline := time.Now().Add(reloadWait)
	if d, ok := ctx.Deadline(); ok && d.After(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	errs := make([]error, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(ids), reloadersPerSession) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for _, st := range s.stages {
					if r, ok := st.(Resetter); ok {
						if err := reset(ctx, r, ids[i]); err != nil {
							errs[i] = fmt.Errorf("reset %d: %w", ids[i], err)
							break
						}
					}
				}
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	err := firstOf(errs)
	if err == nil {
		err = s.hooks(ctx, ids)
	}
	if err != nil {
		// Past the commit: whatever failed, "nothing was written" (the
		// stage's unavailable, a deadline) would be untrue.
		return fmt.Errorf("%w: %v", ErrRestockIncomplete, err)
	}
	return nil
}

// hooks runs the reset hooks of every item (OnReset), the items side by
// side and each item's hooks in order: the crowd's hook waits out the
// sold-out memory's lease after it announces the restock, so that the
// waits of a session's items overlap into one. It returns their errors
// joined.
func (s *Service) hooks(ctx context.Context, ids []int64) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, f := range s.onReset {
				if err := f(ctx, id); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstOf(errs)
}

// firstOf is the first of errs and how many items failed, or nil: a dead
// Redis fails every item of a session, and a thousand joined errors would
// swamp the answer's log line.
func firstOf(errs []error) error {
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			if failed++; first == nil {
				first = err
			}
		}
	}
	if failed > 1 {
		return fmt.Errorf("%w (and %d more items failed)", first, failed-1)
	}
	return first
}
