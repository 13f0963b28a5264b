package inventory

import (
	"context"
	"time"
)

// Stage "unlocked": the naive sale with no guard at all.
//
// Two buyers read the same stock, both see enough, both write stock-1: one
// unit leaves the stock but two orders exist. The CHECK (stock >= 0)
// constraint never fires because every value written is non-negative. This
// is the stage that oversells; every later stage exists because of it.

// NewUnlocked returns the unlocked stage.
func NewUnlocked(store SectionStore, kind string, opts SectionOptions) Stage {
	return NewGuarded(noGuard{}, store, kind, opts)
}

type noGuard struct{}

func (noGuard) Enter(context.Context, string, time.Time) (Held, error) { return noHold{}, nil }

type noHold struct{}

func (noHold) Token() int64                                { return 0 }
func (noHold) Context(ctx context.Context) context.Context { return ctx }
func (noHold) Err() error                                  { return nil }
func (noHold) Exit(context.Context) error                  { return nil }
