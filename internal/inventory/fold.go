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
// A crowd that limits buyers' rates (admission.CrowdOptions.Admit) or
// holds an opening draw (admission.CrowdOptions.Draw) must have its say
// before any unit is taken: it sets those gates on the Fold (Gate), and
// the HTTP layer passes them (PassGates) before it sends the claim. A
// buyer they turn away claims its key with no check, so that a retry of
// a used key is still replayed, and its buy answers what the gate said. A
// gate that keeps its state in Redis (the rate limit) would cost a round
// trip of its own; on one Redis server it runs inside the claim's script
// instead, before the units are taken (ScriptGate, fold_gate.go). A
// keyed sale is then two round trips with crowd control on, as without.
// redis-stream at DurabilityReplica does not fold: its WAIT must follow
// the enqueue on its connection.

// Fold is a buy whose stage's script runs inside the Idempotency-Key
// claim's: RefusalCheck returns one, in its Fold field, where the stage can.
// The HTTP layer tells it what the claim answered (Took), hands it to the
// buy (Service.BuyFolded), and, once the buy is answered,
// has the settle run its Confirm.
type Fold struct {
	order Order
	// pending is the reservations hash a committed order is confirmed
	// in, by confirmSrc; "" for redis-stream, whose writers confirm.
	pending    string
	confirmSrc string
	// mayHaveQueued is set when the claim queues the order (see FoldSpec).
	mayHaveQueued func(err error) bool
	took          bool  // the claim took the units
	left          int64 // the stock it left
	confirm       bool  // the order is committed; the settle confirms it
	// gates, when set, must pass before the claim takes any unit (Gate);
	// gated says they ran, and refused what they answered (PassGates).
	gates   func(ctx context.Context) (*ScriptGate, error)
	gated   bool
	refused error
}

// FoldSpec is what a stage's claim script does with a buy's units (see
// NewFold).
type FoldSpec struct {
	// Order is the order the claim takes the units for.
	Order Order
	// Pending is the reservations hash a committed order is confirmed in,
	// and ConfirmSrc the Lua that confirms it there in the settle's script
	// (see Confirm); "" when the stage's writers confirm.
	Pending, ConfirmSrc string
	// MayHaveQueued, set when the claim also queues the order, reports
	// whether a claim whose script failed with err may have run (the
	// writers would then write the order).
	MayHaveQueued func(err error) bool
}

// NewFold returns the Fold of a claim that does what spec says.
func NewFold(spec FoldSpec) *Fold {
	return &Fold{order: spec.Order, pending: spec.Pending, confirmSrc: spec.ConfirmSrc, mayHaveQueued: spec.MayHaveQueued}
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
	case f.mayHaveQueued != nil && f.mayHaveQueued(err):
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
	return f.confirmSrc, []string{f.pending}, []any{f.order.No}, true
}

// Gate makes the claim wait for g, the crowd control's gates that must
// come before any unit is taken (the rate limit, an opening draw): see
// PassGates. g may leave a gate to the claim's own script: it then
// returns it (a ScriptGate), which the claim runs before it takes any
// unit.
func (f *Fold) Gate(g func(ctx context.Context) (*ScriptGate, error)) { f.gates = g }

// PassGates runs the gates set by Gate, if any, before the claim is sent,
// and reports whether the claim may take the units, and which gate its
// script must run first (nil for none; see RefusalCheck.PassGates). When
// a gate turned the buyer away, the claim must take nothing (claim the
// key with no check), and the buy answers the gate's refusal without
// asking the gates again (Gated).
func (f *Fold) PassGates(ctx context.Context) (*ScriptGate, bool) {
	if f.gates == nil {
		return nil, true
	}
	var g *ScriptGate
	g, f.refused = f.gates(ctx)
	f.gated = true
	return g, f.refused == nil
}

// Gated reports whether f's gates were passed for o's buy before its
// claim, and what they answered: the stage's crowd control must not ask
// them again.
func (f *Fold) Gated(o Order) (bool, error) {
	if f == nil || !f.gated || f.order.No != o.No {
		return false, nil
	}
	return true, f.refused
}

// Holds reports whether f took o's units in the claim.
func (f *Fold) Holds(o Order) bool { return f != nil && f.took && f.order.No == o.No }

// Left is the stock the claim left when it took the units.
func (f *Fold) Left() int64 { return f.left }

// ConfirmLater leaves the confirm of o's reservation, whose order is
// committed, to the settle of its key, if f holds o; it reports whether
// it did.
func (f *Fold) ConfirmLater(o Order) bool {
	if !f.Holds(o) || f.pending == "" {
		return false
	}
	f.confirm = true
	return true
}

// Folder is a stage whose script can run inside the claim's.
type Folder interface {
	// Fold returns the claim's check that also takes o's units, or false
	// when the stage cannot fold o's buy.
	Fold(o Order) (RefusalCheck, bool)
}
