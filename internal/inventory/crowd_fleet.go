package inventory

import (
	"strconv"
	"strings"
	"time"
)

// A sell-out one instance found is news to the others. Without it, each
// instance of a fleet learns on its own, from its own first late buyers:
// until one of them comes back from the stage, every buyer it lets in pays
// the stage too, and under load its line fills with them and bounces the
// rest as overloaded (a post-sale wave once met 83 such 503s on an
// instance that had sold nothing). So an instance announces each sell-out
// it remembers (CrowdOptions.Announce), and the others remember what they
// hear (Crowd.Heard), under the same restock epoch and for a short while
// only: long enough to answer the wave from its first buyer, after which
// an instance that still sees buyers learns the sell-out for good from
// the stage itself. A reset gives the item a new epoch, so a sell-out
// heard under the old one never counts again, however late it arrives.

// SoldOut is a sell-out as the instances of a fleet tell each other.
type SoldOut struct {
	// Item is the item's name among epochs (Crowd's key: "product:1").
	Item string
	// Stage is the stage that found it: each stage remembers its own
	// (WrapShared).
	Stage string
	// Epoch is the restock epoch it was found under, as the Epochs of the
	// instance that hears it know it.
	Epoch string
	// MinQty: a buyer of this many units or more cannot be served.
	MinQty int
	// Closes, as announced, is the time left until the sale closes, when
	// it does (0: it does not), and the sell-out with it.
	Closes time.Duration
	// Trust, as heard, is how long the hearer may trust it (never 0).
	Trust time.Duration
}

// WrapShared is Wrap, with the stage's sell-outs announced to the fleet
// and those the fleet announces for it heard, under name.
func (c *Crowd) WrapShared(name string, stage Stage) Stage {
	w := c.Wrap(stage).(crowded)
	w.m.name = name
	return w
}

// Heard remembers a sell-out another instance announced, for Trust from
// now, unless this instance found the item's stage sold out under that
// epoch itself (its own finding lasts longer). It is for this crowd only when the
// item is of its kind and the stage one it wraps under that name.
func (c *Crowd) Heard(n SoldOut) {
	idText, ok := strings.CutPrefix(n.Item, c.opts.Kind+":")
	id, err := strconv.ParseInt(idText, 10, 64)
	if !ok || err != nil || n.MinQty < 1 || n.Trust <= 0 || n.Epoch == "" {
		return
	}
	c.mu.Lock()
	var m *memo
	for _, x := range c.memos {
		if x.name != "" && x.name == n.Stage {
			m = x
		}
	}
	c.mu.Unlock()
	if m == nil {
		return
	}
	m.heard(id, n.Epoch, n.MinQty, c.opts.Now().Add(n.Trust))
}

// remember remembers a sell-out this instance found, and announces it when
// it is news to this memory (a new one, or one for fewer units).
func (w crowded) remember(id int64, epoch string, qty int, until time.Time) {
	if !w.m.remember(id, epoch, qty, until) || w.m.name == "" || w.c.opts.Announce == nil {
		return
	}
	n := SoldOut{Item: w.c.key(id), Stage: w.m.name, Epoch: epoch, MinQty: qty}
	if !until.IsZero() {
		if n.Closes = until.Sub(w.c.opts.Now()); n.Closes <= 0 {
			return
		}
	}
	w.c.opts.Announce(n)
}

// heard remembers a sell-out heard from the fleet, unless this instance
// found one under the same epoch itself.
func (m *memo) heard(id int64, epoch string, qty int, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mark, ok := m.soldOut[id]; ok && mark.epoch == epoch && !mark.heard {
		return
	}
	m.soldOut[id] = soldOutMark{epoch: epoch, minQty: qty, until: until, heard: true}
}
