package admission

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The Idempotency-Key claim's scripts, passed on through the crowd
// control to the stage behind it.

// Fold passes on the fold of the stage behind the crowd control. A crowd
// that limits buyers' rates or holds an opening draw sets those gates on
// it (inventory.Fold.Gate): they pass before the claim takes any unit.
// The rate limit runs in the claim's own script where it can
// (CrowdOptions.AdmitInScript, on the claim's Redis server): no round
// trip of its own, and still before any unit is taken. A buyer the draw
// holds is asked before the hold, as without the fold.
func (w crowded) Fold(o inventory.Order) (inventory.RefusalCheck, bool) {
	f, ok := w.next.(inventory.Folder)
	if !ok {
		return inventory.RefusalCheck{}, false
	}
	rc, ok := f.Fold(o)
	if ok && rc.Fold != nil && (w.c.opts.Admit != nil || w.c.opts.Draw != nil) {
		client := rc.Client
		rc.Fold.Gate(func(ctx context.Context) (*inventory.ScriptGate, error) {
			b := &buyer{o: o}
			g, ok := w.limitInScript(ctx, o, client)
			if !ok {
				return nil, w.pass(ctx, b, w.beforeClaim)
			}
			// A buyer the draw holds is counted on arrival, in a round
			// trip of its own, as without the fold: counted once let
			// go, at random across the draw, a burst would be spread
			// out for the limit to let through.
			b.beforeHold = func(ctx context.Context) error {
				g = nil
				return limitGate{w.c}.pass(ctx, b)
			}
			err := w.pass(ctx, b, w.drawOnly)
			return g, err
		})
	}
	return rc, ok
}

// limitInScript returns the rate limit's gate for o's claim's script on
// client, counted as RefusedLimited when it turns the buyer away, or
// false when the limit must be asked in a round trip of its own (or is
// off: then the gate is nil).
func (w crowded) limitInScript(ctx context.Context, o inventory.Order, client redis.UniversalClient) (*inventory.ScriptGate, bool) {
	if w.c.opts.AdmitInScript == nil {
		return nil, false
	}
	if !w.c.opts.admitting() {
		return nil, true
	}
	g, ok := w.c.opts.AdmitInScript(ctx, o)
	if !ok || !g.FoldsInto(client) {
		return nil, false
	}
	if g.Src == "" {
		return nil, true
	}
	refused := g.Refused
	g.Refused = func(r string) error {
		w.c.refused(RefusedLimited)
		return refused(r)
	}
	return &g, true
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
