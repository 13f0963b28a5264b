package inventory

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A flash crowd is mostly buyers who are too late, and each of them sends an
// Idempotency-Key. Claiming the key, running the stage and storing its
// answer costs three round trips to Redis for a refusal that takes nothing.
// A stage that sells from a Redis copy offers a RefusalCheck instead:
// Redis runs the stage's read-only checks in the same script as the claim,
// and a buy refused there claims no key and stores nothing (there is
// nothing a retry could miss). One round trip, as without a key.

// RefusalCheck is a buy's refusal check in Lua, for the Idempotency-Key
// claim (idempotency.Refusal). Src defines local function refuse(keys,
// args), which returns a refusal (see RefusalError) or false; it reads the
// keys and writes nothing. It runs only on Client, the stage's own Redis.
type RefusalCheck struct {
	Client redis.UniversalClient
	Src    string
	Keys   []string
	Args   []any
	// Fold, when set, makes the check a Fold: for a buy it does not
	// refuse, refuse also takes the units, and answers with false and
	// what it did (see Fold).
	Fold *Fold
	// learn, when set, is the crowd control's: it remembers what the
	// check refused (see Refused).
	learn func(error)
	// gate, when set, reads the refusal of a gate run first in the
	// script (PassGates).
	gate func(refusal string) error
}

// Refused is the error of a buy this check refused, for the refusal its
// script answered (see RefusalError). Behind a crowd control with sold-out
// memory, the instance also remembers it, as it would the stage's own
// answer: a sell-out for good, or the sale window, under the epoch read
// before the check ran. The next keyed buyer of a sold-out item then costs
// one plain read (idempotency.Store.Used), not a script. A refusal of a
// gate run first in the script (PassGates) is that gate's error, and
// teaches the memory nothing.
func (rc RefusalCheck) Refused(refusal string) error {
	if err := rc.gateRefused(refusal); err != nil {
		return err
	}
	err := RefusalError(refusal)
	if rc.learn != nil {
		rc.learn(err)
	}
	return err
}

// RefusalChecker is a stage that can check in Redis, before a buy runs,
// whether it would be refused.
type RefusalChecker interface {
	// RefusalCheck returns the check of o's buy, or false when there is
	// none.
	RefusalCheck(o Order) (RefusalCheck, bool)
}

// RefusalCheck returns the refusal check of a buy under the named stage, or
// false when the stage has none (it does not sell from Redis) or the
// request is invalid (the buy itself says why). Where the stage can, the
// check is a Fold.
func (s *Service) RefusalCheck(ctx context.Context, stage string, req Request) (RefusalCheck, bool) {
	st, ok := s.stages[stage]
	if !ok || req.Validate() != nil {
		return RefusalCheck{}, false
	}
	rc, ok := s.refusalCheck(st, stage, req)
	if l, learns := st.(RefusalLearner); ok && learns {
		rc.learn = l.Learner(ctx, req)
	}
	return rc, ok
}

func (s *Service) refusalCheck(st Stage, stage string, req Request) (RefusalCheck, bool) {
	if f, ok := st.(Folder); ok {
		if rc, ok := f.Fold(s.newOrder(st, stage, req)); ok {
			return rc, true
		}
	}
	rc, ok := st.(RefusalChecker)
	if !ok {
		return RefusalCheck{}, false
	}
	return rc.RefusalCheck(Order{ItemID: req.ItemID, UserID: req.UserID, Quantity: req.Quantity})
}

// RefusalLearner is a stage that remembers what a refusal check refused
// (the crowd control, package admission).
type RefusalLearner interface {
	// Learner returns what a refusal check of req's buy teaches the
	// stage's memory, under what it knows before the check's script runs.
	Learner(ctx context.Context, req Request) func(error)
}

// RefusalError is the error of a buy its RefusalCheck refused: a
// *NotOpen, ErrSaleClosed, ErrSoldOut (for good, or for now: units are
// reserved or queued and may still come back) or ErrAlreadyPurchased, the
// stage's own answers to the same buy.
func RefusalError(refusal string) error {
	if ms, ok := strings.CutPrefix(refusal, "sale-not-open:"); ok {
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: unknown refusal %q", ErrUnavailable, refusal)
		}
		return &NotOpen{Wait: time.Duration(n) * time.Millisecond}
	}
	if ms, ok := strings.CutPrefix(refusal, "sold-out:"); ok {
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: unknown refusal %q", ErrUnavailable, refusal)
		}
		return fmt.Errorf("%w (refused by the Idempotency-Key claim's check; %w)", ErrSoldOut, closesIn(time.Duration(n)*time.Millisecond))
	}
	switch refusal {
	case "sale-closed":
		return fmt.Errorf("%w (refused by the Idempotency-Key claim's check)", ErrSaleClosed)
	case "sold-out":
		return fmt.Errorf("%w (refused by the Idempotency-Key claim's check)", ErrSoldOut)
	case "sold-out-for-now":
		// As the stage's own -4: not remembered (admission's Learner).
		return fmt.Errorf("%w: %w (refused by the Idempotency-Key claim's check)", ErrSoldOut, ErrMayReturn)
	case "already-purchased":
		return fmt.Errorf("%w (refused by the Idempotency-Key claim's check)", ErrAlreadyPurchased)
	}
	return fmt.Errorf("%w: unknown refusal %q", ErrUnavailable, refusal)
}
