package admission

import (
	"context"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The Idempotency-Key claim's scripts, passed on through the crowd
// control to the stage behind it.

// Fold passes on the fold of the stage behind the crowd control. A crowd
// that limits buyers' rates or holds an opening draw sets those gates on
// it (inventory.Fold.Gate): they pass before the claim takes any unit.
func (w crowded) Fold(o inventory.Order) (inventory.RefusalCheck, bool) {
	f, ok := w.next.(inventory.Folder)
	if !ok {
		return inventory.RefusalCheck{}, false
	}
	rc, ok := f.Fold(o)
	if ok && rc.Fold != nil && (w.c.opts.Admit != nil || w.c.opts.Draw != nil) {
		rc.Fold.Gate(func(ctx context.Context) error { return w.pass(ctx, &buyer{o: o}, w.beforeClaim) })
	}
	return rc, ok
}

// refusalCheck passes on the check of the stage behind the crowd control,
// if it has one. A keyed late buyer then costs the claim's one script,
// where the claim, the answer from memory and giving the key up would
// cost two.
func (w crowded) RefusalCheck(o inventory.Order) (inventory.RefusalCheck, bool) {
	rc, ok := w.next.(inventory.RefusalChecker)
	if !ok {
		return inventory.RefusalCheck{}, false
	}
	return rc.RefusalCheck(o)
}
