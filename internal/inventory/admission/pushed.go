package admission

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The crowd's side of a sell-out the fleet hears at once (see
// epochs_soldout.go): a stage wrapped under a name (WrapNamed) tells the
// other instances when it learns that an item is sold out for good, and
// remembers what they tell it of the stage of the same name.

// announceWithin bounds one announcement. It is sent beside the buyer's
// answer, not before it: a lost one costs the other instances a stage
// answer each, as before pushes.
const announceWithin = time.Second

// WrapNamed is Wrap for the stage the fleet knows by name: a sell-out it
// learns is announced to the other instances, and theirs of the stage of
// that name are remembered here.
func (c *Crowd) WrapNamed(name string, stage inventory.Stage) inventory.Stage {
	return c.wrap(name, stage)
}

// learnSoldOut remembers that item id is sold out under epoch for buyers
// of qty units or more, as the stage found when it was asked at now, and
// tells the fleet when that is news and for good (no closing: the closing
// is measured from the buy, which another instance cannot place).
func (w crowded) learnSoldOut(id int64, epoch string, qty int, until, now time.Time) {
	if w.m.remember(id, epoch, qty, until, now) && until.IsZero() && w.name != "" {
		w.c.announce(w.name, id, epoch, qty)
	}
}

// announce tells the fleet, beside the buyer's answer, that stage sold
// item id out under epoch.
func (c *Crowd) announce(stage string, id int64, epoch string, qty int) {
	b, ok := c.opts.Epochs.(soldOutBoard)
	if !ok {
		return
	}
	item := c.key(id)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), announceWithin)
		defer cancel()
		// Its error is not the buyer's: a lost announcement leaves the
		// other instances learning from their stages, as before.
		_ = b.AnnounceSoldOut(ctx, item, stage, epoch, qty)
	}()
}

// heard remembers a sell-out another instance announced for the stage of
// that name, under the epoch this instance trusts for the item now.
func (c *Crowd) heard(item, stage, epoch string, qty int) {
	n, ok := strings.CutPrefix(item, c.opts.Kind+":")
	if !ok {
		return // another kind's
	}
	id, err := strconv.ParseInt(n, 10, 64)
	c.mu.Lock()
	m := c.named[stage]
	c.mu.Unlock()
	if err != nil || m == nil {
		return
	}
	m.remember(id, epoch, qty, time.Time{}, c.opts.Now())
}
