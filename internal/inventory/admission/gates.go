package admission

import (
	"context"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The gates a buyer passes before a wrapped stage, in this order (see
// Crowd's comment for why each is there): the sale window remembered, the
// sell-out remembered, the rate limit, the opening draw, the line. Each
// lets the buyer on (nil) or turns it away with its answer, having
// counted the refusal. The cheap answers from memory come first; the
// line, the one gate that keeps a place, comes last, so that a buyer
// turned away earlier takes none.

// gate is one step on a buyer's way to the stage.
type gate interface {
	pass(ctx context.Context, b *buyer) error
}

// buyer is one buyer on its way through the gates: its order, and the
// item's restock epoch it is judged by (remembered is false when there
// is no memory or no epoch to trust).
type buyer struct {
	o          inventory.Order
	epoch      string
	remembered bool
	// beforeHold, when set, runs before the draw holds the buyer, and
	// turns it away with its error (claim.go).
	beforeHold func(ctx context.Context) error
}

// gatesOf returns the gates in front of w's stage, in order.
func gatesOf(w crowded) []gate {
	return []gate{windowGate{w}, soldOutGate{w}, limitGate{w.c}, drawGate{w}, lineGate{w}}
}

// A keyed buy whose claim folds the stage's script (inventory.Fold)
// passes the gates in two parts: those that must have their say before
// any unit is taken (the rate limit, the draw) before its claim is sent,
// and, when the claim did not take the units (a key tried before), the
// rest in front of the stage. The memory's gates do not come before the
// claim: a keyed buyer is answered from memory only while its key was
// never used (the HTTP layer's answeredFromMemory), and the claim's
// script refuses as the stage would.

// beforeClaimOf returns the gates a folded buy passes before its claim.
func beforeClaimOf(w crowded) []gate { return []gate{limitGate{w.c}, drawGate{w}} }

// afterClaimOf returns the gates a folded buy whose claim took nothing
// passes after it, before the stage.
func afterClaimOf(w crowded) []gate {
	return []gate{windowGate{w}, soldOutGate{w}, lineGate{w}}
}

// pass reads b's epoch and takes b through gates, in order: nil when
// every one let it on.
func (w crowded) pass(ctx context.Context, b *buyer, gates []gate) error {
	if w.m != nil {
		b.epoch, b.remembered = w.c.epoch(ctx, b.o.ItemID)
	}
	for _, g := range gates {
		if err := g.pass(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// soldOut reports whether the memory holds b's item sold out for b's
// quantity under b's epoch.
func (w crowded) soldOut(b *buyer) bool {
	return b.remembered && w.m.isSoldOut(b.o.ItemID, b.epoch, b.o.Quantity, w.c.opts.Now())
}

// windowGate answers a buyer whose item is remembered outside its sale
// window: not open yet, or closed.
type windowGate struct{ w crowded }

func (g windowGate) pass(_ context.Context, b *buyer) error {
	if !b.remembered {
		return nil
	}
	if err := g.w.m.outsideWindow(b.o.ItemID, b.epoch, g.w.c.opts.Now()); err != nil {
		g.w.c.refused(RefusedWindowRemembered)
		return err
	}
	return nil
}

// soldOutGate answers a buyer whose item is remembered sold out.
type soldOutGate struct{ w crowded }

func (g soldOutGate) pass(_ context.Context, b *buyer) error {
	if g.w.soldOut(b) {
		g.w.c.refused(RefusedRemembered)
		return inventory.ErrRememberedSoldOut
	}
	return nil
}

// limitGate asks the rate limit about the buyer (CrowdOptions.Admit),
// while it applies.
type limitGate struct{ c *Crowd }

func (g limitGate) pass(ctx context.Context, b *buyer) error {
	if !g.c.opts.admitting() {
		return nil
	}
	if err := g.c.opts.Admit(ctx, b.o); err != nil {
		g.c.refused(RefusedLimited)
		return err
	}
	return nil
}

// drawGate holds a buyer of an opening's first moments for its place in
// the draw (draw.go), then judges it again by the memory of now.
type drawGate struct{ w crowded }

func (g drawGate) pass(ctx context.Context, b *buyer) error {
	c := g.w.c
	if !c.opts.Draw.on() || inventory.HasPass(ctx) { // the room drew its pass holders
		return nil
	}
	if err := c.opts.Draw.hold(ctx, b.o.ItemID, b.epoch, g.w.clock, b.beforeHold); err != nil {
		return err
	}
	if g.w.m != nil {
		// A reset may have come while this buyer was held: judge (and
		// remember) by the epoch of now, not of its arrival.
		b.epoch, b.remembered = c.epoch(ctx, b.o.ItemID)
	}
	if g.w.soldOut(b) {
		// Sold out while this buyer was held.
		c.refused(RefusedRemembered)
		return inventory.ErrRememberedSoldOut
	}
	return nil
}

// lineGate lets a buyer into the item's line, through its door when the
// line is full and its pace not known yet, or turns it away with a Busy.
// A buyer it lets on is inside: crowded.Buy lets it out after the stage.
type lineGate struct{ w crowded }

func (g lineGate) pass(ctx context.Context, b *buyer) error {
	c, id := g.w.c, b.o.ItemID
	if inventory.HasPass(ctx) {
		// A waiting room's pass holder: the room sized its admission to
		// the sale, so the cap does not bounce it; it is inside all the
		// same, and let out after the stage.
		c.mu.Lock()
		c.inside[id]++
		c.mu.Unlock()
		return nil
	}
	fromDoor := c.door(ctx, id)
	if fromDoor {
		if c.afterDoor != nil {
			c.afterDoor()
		}
		if g.w.soldOut(b) {
			// The first buyer out of the line found it sold out while
			// this one waited at the door.
			c.leaveDoor(id)
			c.refused(RefusedRemembered)
			return inventory.ErrRememberedSoldOut
		}
	}
	if n, wait, ok := c.enter(id, fromDoor); !ok {
		c.refused(RefusedBounced)
		return &Busy{ItemID: id, Queue: n, Wait: wait}
	}
	return nil
}
