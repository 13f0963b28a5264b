package admission

import (
	"context"
	"strconv"
	"strings"
)

// A sell-out the whole fleet hears at once. The instance that sells an
// item's last unit (or whose stage first answers it sold out for good)
// publishes it on soldOutChannel with the epoch it was seen under, and
// every instance that trusts that same epoch remembers it: the post-sale
// wave is answered from memory from its first late buyer on every
// instance, not only on the one that sold out.
//
// It is a message of its own kind, on a channel of its own: a message on
// epochChannel drops the item's epoch, and would erase the memory it
// announces. A reset still wins. A receiver trusts a sell-out only under
// the epoch it trusts now (remembered from a read within the lease, in
// this session): a sell-out of an older epoch is ignored, and one heard
// before a bump is remembered under the epoch the bump replaces, which no
// buyer is judged by once the bump is heard or its Settle has returned.
// An instance that has not read the item's epoch within the lease reads it
// when the message comes (heardSoldOut). A message that is lost costs what
// it cost before: that instance's first late buyer learns the sell-out
// from its stage.

// soldOutChannel carries the sell-outs: "<item> <stage> <epoch> <qty>",
// the epoch as stored in Redis (without the reader's session).
const soldOutChannel = "seckill:soldout"

// soldOutBoard is Epochs that can tell the fleet of a sell-out.
type soldOutBoard interface {
	// AnnounceSoldOut publishes that stage sold item out, for buyers of
	// qty units or more, under epoch (as Epoch returned it).
	AnnounceSoldOut(ctx context.Context, item, stage, epoch string, qty int) error
	// OnSoldOut makes f hear every sell-out announced by an instance
	// under the epoch this one trusts now (as Epoch returns it).
	OnSoldOut(f func(item, stage, epoch string, qty int))
}

// AnnounceSoldOut publishes a sell-out of item by stage under epoch, as
// Epoch returned it, if its stored value is still the item's epoch now
// (from memory, or read again): a sell-out seen under an epoch since
// replaced is not worth telling, and it sends nothing then. The sessions
// are not compared: a burst's buyers dial connections, each a new session,
// and the sale's own last unit would go untold. What the session guards
// against (a Redis restarted from an older snapshot) needs the restart to
// come between the sale and this announcement, bounded by announceWithin.
func (e *RedisEpochs) AnnounceSoldOut(ctx context.Context, item, stage, epoch string, qty int) error {
	now, err := e.Epoch(ctx, item)
	if err != nil {
		return err
	}
	stored, _, _ := strings.Cut(now, "/")
	if seen, _, _ := strings.Cut(epoch, "/"); seen != stored {
		return nil
	}
	return e.rdb.Publish(ctx, soldOutChannel, soldOutMessage(item, stage, stored, qty)).Err()
}

// soldOutMessage is the message that tells of a sell-out of item by stage,
// for buyers of qty units or more, under the epoch stored.
func soldOutMessage(item, stage, stored string, qty int) string {
	return item + " " + stage + " " + stored + " " + strconv.Itoa(qty)
}

// OnSoldOut adds f to those who hear the sell-outs announced under the
// epochs this instance trusts.
func (e *RedisEpochs) OnSoldOut(f func(item, stage, epoch string, qty int)) {
	e.mu.Lock()
	e.soldOutTo = append(e.soldOutTo, f)
	e.mu.Unlock()
}

// trusted returns item's remembered epoch (as Epoch returns it) while it
// is trusted (see Epoch); e.mu is held.
func (e *RedisEpochs) trusted(item string) (string, bool) {
	k, ok := e.known[item]
	if !ok || !e.live || e.now().Sub(k.readAt) >= e.lease {
		return "", false
	}
	return k.value, true
}

// heardSoldOut passes a sell-out message on to those who hear them, if
// its epoch is the one this instance trusts for the item now; a message
// of another shape is ignored. An instance that has not read the item's
// epoch within the lease (it has had no buyer of it yet: the wave meets
// it knowing nothing) reads it first, one GET per sell-out, so that its
// first late buyer is answered from memory too. The read is made here,
// in the subscription's order: a bump announced after the sell-out is
// heard after it, and drops what it taught.
func (e *RedisEpochs) heardSoldOut(ctx context.Context, payload string) {
	item, stage, stored, qty, ok := parseSoldOut(payload)
	applied := false
	if ok {
		value, trusted := e.trustedNow(ctx, item)
		if e.compared != nil {
			e.compared()
		}
		e.mu.Lock()
		to := e.soldOutTo
		e.mu.Unlock()
		now, _, _ := strings.Cut(value, "/")
		if applied = trusted && now == stored; applied {
			for _, hear := range to {
				hear(item, stage, value, qty)
			}
		}
	}
	if e.heard != nil {
		e.heard(payload, applied)
	}
}

// trustedNow returns the item's epoch this instance trusts (as Epoch
// returns it), read from Redis if it trusts none (within announceWithin).
// A sell-out is passed on under this value, the one it was compared with:
// the memory may hold a newer one a moment later (a reset, and a buyer's
// read before the reset's message is heard).
func (e *RedisEpochs) trustedNow(ctx context.Context, item string) (string, bool) {
	e.mu.Lock()
	now, ok := e.trusted(item)
	e.mu.Unlock()
	if ok {
		return now, true
	}
	rctx, cancel := context.WithTimeout(ctx, announceWithin)
	defer cancel()
	if _, err := e.Epoch(rctx, item); err != nil {
		return "", false // as if the message were lost: the stage teaches it
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.trusted(item)
}

// parseSoldOut reads a sell-out message (soldOutMessage).
func parseSoldOut(payload string) (item, stage, stored string, qty int, ok bool) {
	f := strings.Split(payload, " ")
	if len(f) != 4 {
		return "", "", "", 0, false
	}
	qty, err := strconv.Atoi(f[3])
	if err != nil || qty <= 0 {
		return "", "", "", 0, false
	}
	return f[0], f[1], f[2], qty, true
}
