package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A keyed sale under redis-atomic cost four round trips to Redis: claim
// the Idempotency-Key, reserve the unit, confirm the reservation once the
// order is committed, store the answer. Where the key records live on the
// stage's own Redis (one server), the first two and the last two fold into
// one script each: the claim's script takes the unit (fold.lua), and the
// settle's script that stores the answer confirms the reservation
// (confirm.lua). Two round trips, as a sale without a key. Under
// redis-stream the claim takes the unit and queues the order, and the
// writers confirm it: two, where it was three.
//
// A folded buy has its units before it reaches the crowd control, so the
// crowd lets it through (it takes no place in the line: it only writes).
// A crowd that limits buyers' rates (CrowdOptions.Admit, while Admitting)
// does not fold: the limiter comes before the stage; nor does one holding
// an opening draw (CrowdOptions.Draw), which must hold the buyer before
// any unit is taken. Neither does redis-stream at
// DurabilityReplica, whose WAIT must follow the enqueue on its connection.

// Fold is a buy whose stage's script runs inside the Idempotency-Key
// claim's: RefusalCheck returns one, in its Fold field, where the stage can.
// The HTTP layer tells it what the claim answered (Took), passes it to the
// buy in the request's context (WithFold), and, once the buy is answered,
// has the settle run its Confirm.
type Fold struct {
	order Order
	// pending is the reservations hash a committed order is confirmed
	// in; "" for redis-stream, whose writers confirm.
	pending string
	queues  bool
	took    bool  // the claim took the units
	left    int64 // the stock it left
	confirm bool  // the order is committed; the settle confirms it
}

// Took records what the claim's script answered of the fold (the claim's
// Reply): the units were taken ("took:<left>"), or not, and the stage runs
// its own script ("code:<code>", or "" when the script did not run the
// fold: a key tried before). It fails with ErrUnavailable on any other
// answer.
func (f *Fold) Took(reply string) error {
	f.took = false
	if reply == "" || strings.HasPrefix(reply, "code:") {
		return nil
	}
	n, ok := strings.CutPrefix(reply, "took:")
	left, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || left < 0 {
		return fmt.Errorf("%w: the claim's fold answered %q", ErrUnavailable, reply)
	}
	f.took, f.left = true, left
	return nil
}

// ClaimFailed is the error of a buy whose claim's script failed with err
// (see idempotency.ScriptError): when the fold queues and the script may
// have run, ErrOutcomeUnknown, since the writers would then write the
// order; when the request's context was over before the script was sent
// (notSent), that context's error alone (a timeout that bought nothing);
// otherwise err, as unavailable. A reservation whose claim's reply was
// lost is given back by the reconcile job (its order is never written).
func (f *Fold) ClaimFailed(err error) error {
	switch {
	case f.queues && mayHaveRun(err):
		return fmt.Errorf("%w: order %s may be queued, the claim's reply was lost: %v", ErrOutcomeUnknown, f.order.No, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("order %s: the claim was not sent: %w", f.order.No, context.DeadlineExceeded)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("order %s: the claim was not sent: %w", f.order.No, context.Canceled)
	}
	return err
}

// Confirm is what the settle of the buy's key must also run, in its
// script (idempotency.Also): Lua that defines local function also(keys,
// args), its keys and args. ok is false when there is nothing to confirm.
func (f *Fold) Confirm() (src string, keys []string, args []any, ok bool) {
	if !f.confirm {
		return "", nil, nil, false
	}
	return confirmSrc, []string{f.pending}, []any{f.order.No}, true
}

// holds reports whether f took o's units in the claim.
func (f *Fold) holds(o Order) bool { return f != nil && f.took && f.order.No == o.No }

// confirmLater leaves the confirm of o's reservation, whose order is
// committed, to the settle of its key, if f holds o; it reports whether
// it did.
func (f *Fold) confirmLater(o Order) bool {
	if !f.holds(o) || f.pending == "" {
		return false
	}
	f.confirm = true
	return true
}

// foldKey marks a context with a buy's Fold.
type foldKey struct{}

// WithFold marks ctx as the context of the buy whose claim ran f.
func WithFold(ctx context.Context, f *Fold) context.Context {
	return context.WithValue(ctx, foldKey{}, f)
}

func foldOf(ctx context.Context) *Fold { f, _ := ctx.Value(foldKey{}).(*Fold); return f }

// folder is a stage whose script can run inside the claim's.
type folder interface {
	fold(o Order) (RefusalCheck, bool)
}

// fold: the claim takes the units as reserve.lua would.
func (s *RedisAtomic) fold(o Order) (RefusalCheck, bool) {
	keys := append(s.keys(o.ItemID), s.key(o.ItemID, "window"))
	return RefusalCheck{Client: s.rdb, Src: foldReserveSrc, Keys: keys, Args: []any{o.UserID, o.Quantity, o.No},
		Fold: &Fold{order: o, pending: keys[2]}}, true
}

// fold: the claim takes the units and queues the order, as enqueue.lua
// would; not at DurabilityReplica.
func (s *RedisStream) fold(o Order) (RefusalCheck, bool) {
	if s.opts.Durability == DurabilityReplica {
		return RefusalCheck{}, false
	}
	keys, args := s.enqueueKeys(o)
	return RefusalCheck{Client: s.rdb, Src: foldEnqueueSrc, Keys: keys, Args: args,
		Fold: &Fold{order: o, queues: true}}, true
}

// fold passes on the fold of the stage behind the crowd control, unless
// the crowd limits buyers' rates or holds an opening draw.
func (w crowded) fold(o Order) (RefusalCheck, bool) {
	f, ok := w.next.(folder)
	if !ok || w.c.opts.admitting() || w.c.opts.Draw.on() {
		return RefusalCheck{}, false
	}
	return f.fold(o)
}
