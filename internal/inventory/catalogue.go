package inventory

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"
)

// The catalogue as the admin API keeps it: items created or replaced by
// id, archived, and read a page at a time. Scheduling many sales at once
// is session.go.

// ErrArchived is the error of a write to an archived item's id: its orders
// are kept under that id, so no new item may take it.
var ErrArchived = errors.New("item archived")

// Bounds of what the catalogue accepts. MaxName is the width of the name
// columns (VARCHAR(128)), in characters.
const (
	MaxName       = 128
	MaxStock      = 1_000_000_000
	MaxPriceCents = 1_000_000_000_000
)

// Listing is an item as the admin API creates or replaces it.
type Listing struct {
	ID         int64
	Name       string
	PriceCents int64 // products only; 0 for a coupon batch
	Stock      int
}

// Validate checks a listing against the columns' bounds, naming the
// field; it returns ErrInvalid.
func (l Listing) Validate() error {
	if l.ID <= 0 {
		return fmt.Errorf("%w: id must be a positive integer", ErrInvalid)
	}
	if err := validName("name", l.Name); err != nil {
		return err
	}
	if l.PriceCents < 0 || l.PriceCents > MaxPriceCents {
		return fmt.Errorf("%w: price_cents must be between 0 and %d", ErrInvalid, int64(MaxPriceCents))
	}
	return validStock("stock", l.Stock)
}

// validName checks a name: 1 to MaxName characters of text without
// control characters.
func validName(field, name string) error {
	n := utf8.RuneCountInString(name)
	switch {
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s must be UTF-8 text", ErrInvalid, field)
	case n < 1 || n > MaxName:
		return fmt.Errorf("%w: %s must be 1 to %d characters (it has %d)", ErrInvalid, field, MaxName, n)
	case hasControl(name):
		return fmt.Errorf("%w: %s must not contain control characters", ErrInvalid, field)
	}
	return nil
}

func validStock(field string, n int) error {
	if n < 0 || n > MaxStock {
		return fmt.Errorf("%w: %s must be between 0 and %d", ErrInvalid, field, MaxStock)
	}
	return nil
}

// The sale states a page may be filtered by, as the reference clock sees
// them now: before the window (scheduled), in it with stock (open), in it
// without (sold-out), past it (closed). An item without a window is open
// or sold out.
const (
	StateScheduled = "scheduled"
	StateOpen      = "open"
	StateSoldOut   = "sold-out"
	StateClosed    = "closed"
)

// SaleStates lists the states, in the order a sale goes through them.
var SaleStates = []string{StateScheduled, StateOpen, StateSoldOut, StateClosed}

// PageQuery asks for a page of the catalogue: up to Limit items whose id
// is above After, in id order, in State if it is set.
type PageQuery struct {
	After int64
	Limit int
	State string
}

// CatalogueStore is a catalog the admin API can write, and read a page at
// a time. The store package's Ledger is one.
type CatalogueStore interface {
	// Put creates the item, or replaces its name, price and stock
	// (keeping its orders and window); created says which. It returns
	// ErrArchived for an archived id.
	Put(ctx context.Context, l Listing) (created bool, err error)
	// Archive moves the item out of the catalogue, keeping its orders. It
	// returns ErrNotFound for an id that was never an item; archiving an
	// archived item again does nothing.
	Archive(ctx context.Context, id int64) error
	// Page reads one page of the catalogue by id (keyset), never an
	// archived item.
	Page(ctx context.Context, q PageQuery) ([]Item, error)
	SessionStore
}

// Forgetter is a stage that keeps a copy of an item's stock (in Redis) and
// drops it when the item is archived, so that its next buyer finds no
// item instead of the copy.
type Forgetter interface {
	Forget(ctx context.Context, id int64) error
}

// catalogue is the service's store as a CatalogueStore, or ErrInvalid.
func (s *Service) catalogue() (CatalogueStore, error) {
	cs, ok := s.store.(CatalogueStore)
	if !ok {
		return nil, fmt.Errorf("%w: this catalog cannot be written through the API", ErrInvalid)
	}
	return cs, nil
}

// Put creates or replaces an item by id: the same listing twice leaves the
// same item. A replaced item keeps its orders and its window; its stock is
// the units on sale from now on (its initial stock moves by as much, so
// that its audit still balances), and every copy of it is reloaded and the
// fleet forgets a sell-out, as after a reset. It returns ErrInvalid for a
// bad listing (nothing written) and ErrArchived.
func (s *Service) Put(ctx context.Context, l Listing) (created bool, err error) {
	if err := l.Validate(); err != nil {
		return false, err
	}
	cs, err := s.catalogue()
	if err != nil {
		return false, err
	}
	if s.life.Queue != nil {
		// Orders accepted before the new stock are written before it.
		s.life.Queue.Drain(ctx, l.ID)
	}
	if created, err = cs.Put(ctx, l); err != nil || created {
		return created, err
	}
	return false, s.restocked(ctx, []int64{l.ID}, func(ctx context.Context, r Resetter, id int64) error { return r.Reset(ctx, id, l.Stock) })
}

// Archive takes an item out of the catalogue: buyers then get ErrNotFound,
// the lists leave it out, and its orders are kept. It returns ErrNotFound
// for an id that was never an item.
func (s *Service) Archive(ctx context.Context, id int64) error {
	cs, err := s.catalogue()
	if err != nil {
		return err
	}
	if s.life.Queue != nil {
		s.life.Queue.Drain(ctx, id)
	}
	if err := cs.Archive(ctx, id); err != nil {
		return err
	}
	for _, st := range s.stages {
		if f, ok := st.(Forgetter); ok {
			if err := f.Forget(ctx, id); err != nil {
				return fmt.Errorf("archive %d: %w", id, err)
			}
		}
	}
	// A sell-out remembered would answer its buyers before the stage
	// could say that the item is gone.
	return s.hooks(ctx, []int64{id})
}

// Page returns one page of the catalogue (see PageQuery), or ErrInvalid
// for an unknown state. List is sorted by id.
func (s *Service) Page(ctx context.Context, q PageQuery) ([]Item, error) {
	if q.State != "" && !validState(q.State) {
		return nil, fmt.Errorf("%w: state must be one of %v", ErrInvalid, SaleStates)
	}
	if cs, ok := s.store.(CatalogueStore); ok {
		return cs.Page(ctx, q)
	}
	// A catalog without pages (a test's): the page is cut from the list.
	if q.State != "" {
		return nil, fmt.Errorf("%w: this catalog cannot filter by state", ErrInvalid)
	}
	all, err := s.store.List(ctx)
	if err != nil {
		return nil, err
	}
	var page []Item
	for _, it := range all {
		if it.ID > q.After && len(page) < q.Limit {
			page = append(page, it)
		}
	}
	return page, nil
}

func validState(state string) bool {
	for _, s := range SaleStates {
		if s == state {
			return true
		}
	}
	return false
}
