package inventory

import "context"

// Stage "unlocked": the naive sale with no guard at all.
//
// Two buyers read the same stock, both see enough, both write stock-1: one
// unit leaves the stock but two orders exist. The CHECK (stock >= 0)
// constraint never fires because every value written is non-negative. This
// is the stage that oversells; every later stage exists because of it.

// NewUnlocked returns the unlocked stage.
func NewUnlocked(store Store, kind string, opts SectionOptions) Stage {
	return NewGuarded(noGuard{}, store, kind, opts)
}

type noGuard struct{}

func (noGuard) Enter(context.Context, string) (Held, error) { return noHold{}, nil }

type noHold struct{}

func (noHold) Token() int64               { return 0 }
func (noHold) Exit(context.Context) error { return nil }
