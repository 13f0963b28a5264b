package admission

import "github.com/seckill-lab/seckill/internal/inventory"

// The Idempotency-Key claim's scripts, passed on through the crowd
// control to the stage behind it.

// fold passes on the fold of the stage behind the crowd control, unless
// the crowd limits buyers' rates or holds an opening draw.
func (w crowded) Fold(o inventory.Order) (inventory.RefusalCheck, bool) {
	f, ok := w.next.(inventory.Folder)
	if !ok || w.c.opts.admitting() || w.c.opts.Draw.on() {
		return inventory.RefusalCheck{}, false
	}
	return f.Fold(o)
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
