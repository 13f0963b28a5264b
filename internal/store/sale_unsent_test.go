package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
)

// endsAtFirstErr is a context whose deadline passes at the first moment
// anyone asks it for its error: database/sql only watches Done while it
// hands out a connection, and the driver asks Err before it sends
// anything, so the deadline passes after the pool gave the sale its
// connection and before the driver wrote a byte.
type endsAtFirstErr struct {
	context.Context
	once   sync.Once
	cancel context.CancelFunc
}

func (c *endsAtFirstErr) Err() error {
	c.once.Do(c.cancel)
	if c.Context.Err() != nil {
		return context.DeadlineExceeded
	}
	return nil
}

// TestSaleCutOffBeforeItWasSentHasAKnownOutcome: a sale whose deadline
// passed once it had a connection, but before the driver sent its batch,
// sent MySQL nothing: its error is the deadline's, not
// inventory.ErrOutcomeUnknown, which the API answers ahead of a timeout
// (as TestSaleThatNeverLeftHasAKnownOutcome, one step later).
func TestSaleCutOffBeforeItWasSentHasAKnownOutcome(t *testing.T) {
	ctx := context.Background()
	db, writes := countedMySQL(t, store.Pool{MaxConns: 1})
	l := db.Products()
	if err := l.Reset(ctx, 1, 5); err != nil {
		t.Fatal(err)
	}
	inner, cancel := context.WithCancel(ctx)
	defer cancel()
	cut := &endsAtFirstErr{Context: inner, cancel: cancel}
	before := writes.Load()
	err := l.Deduct(cut, order("unsent-1", "unsent", 1))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, inventory.ErrOutcomeUnknown) {
		t.Errorf("a sale whose batch was never sent failed with %v, want the deadline's error and not %v", err, inventory.ErrOutcomeUnknown)
	}
	if sent := writes.Load() - before; sent != 0 {
		t.Errorf("a sale whose batch was never sent sent %d commands after it (nothing to roll back)", sent)
	}
	if a, err := l.Audit(ctx, 1); err != nil || a.Orders != 0 || a.Stock != 5 {
		t.Fatalf("Audit = %+v, %v; want nothing written", a, err)
	}
}
