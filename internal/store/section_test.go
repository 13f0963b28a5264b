package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestWriteCutOffByALostLockIsNotNothing: a lock holder's write is in
// flight on MySQL when its lease is lost. The loss cancels the section's
// context, and the buyer must not hear "lock lost, nothing was written"
// (503 lock-lost, the key let go) if the write can still land: MySQL runs
// a batch whose client hung up to its end, and a fenced write that no
// newer holder overtook commits. Either nothing was written, or the buyer
// hears that the outcome is unknown.
//
// The write is held where the hang-up counts: its INSERT waits for another
// session's uncommitted order of the same buyer; the lease is lost while
// it waits, then that session rolls back.
func TestWriteCutOffByALostLockIsNotNothing(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			dsn := testenv.MySQLDSN(t)
			ctx := context.Background()
			l := k.ledger(openMySQL(t, dsn, store.Pool{MaxConns: 2}))
			if err := l.Reset(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			it, err := l.Get(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			admin, holder := otherSession(t, dsn)
			if _, err := holder.ExecContext(ctx, heldOrder[k.name]); err != nil {
				t.Fatal(err)
			}

			guard := &losableGuard{token: it.FenceToken + 1, lost: make(chan struct{})}
			section := inventory.NewGuarded(guard, l, k.name, inventory.SectionOptions{Fencing: true})
			no := "lock-lost-" + k.name
			bought := make(chan error, 1)
			go func() { bought <- section.Buy(ctx, order(no, "leaver", 1)) }()
			session := waitingFor(t, admin, "the write's INSERT", no)
			guard.lose()
			err = <-bought
			if err == nil {
				t.Fatal("a write cut off by the lost lock answered as a sale")
			}
			if err := holder.Rollback(); err != nil {
				t.Fatal(err)
			}
			sessionGone(t, admin, session)

			a, aerr := l.Audit(ctx, 1)
			switch {
			case aerr != nil:
				t.Fatal(aerr)
			case !a.Conserved() || a.Oversold() != 0:
				t.Fatalf("Audit = %+v; want the write all or nothing", a)
			case a.Orders == 1 && errors.Is(err, inventory.ErrLockLost):
				t.Fatalf("the order was written, and the buyer heard: %v", err)
			case a.Orders == 1 && !errors.Is(err, inventory.ErrOutcomeUnknown):
				t.Fatalf("the order was written, and the buyer heard %v; want an unknown outcome", err)
			}
			t.Logf("orders %d, the buyer heard: %v", a.Orders, err)
		})
	}
}

// heldOrder is another session's order of the buyer "leaver", per kind.
var heldOrder = map[string]string{
	"products": "INSERT INTO orders (order_no, product_id, user_id, quantity, stage) VALUES ('held', 1, 'leaver', 1, 'test')",
	"coupons":  "INSERT INTO coupon_grabs (grab_no, batch_id, user_id, quantity, stage) VALUES ('held', 1, 'leaver', 1, 'test')",
}

// losableGuard grants one hold with the given fencing token, whose context
// ends, and whose Err turns to inventory.ErrLockLost, once lose is called:
// a lease lost while its holder works.
type losableGuard struct {
	token int64
	lost  chan struct{}
	once  sync.Once
}

func (g *losableGuard) lose() { g.once.Do(func() { close(g.lost) }) }

func (g *losableGuard) Enter(context.Context, string, time.Time) (inventory.Held, error) {
	return losableHold{g}, nil
}

type losableHold struct{ g *losableGuard }

func (h losableHold) Token() int64 { return h.g.token }

func (h losableHold) Context(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		select {
		case <-h.g.lost:
		case <-ctx.Done():
		}
	}()
	return ctx
}

func (h losableHold) Err() error {
	select {
	case <-h.g.lost:
		return fmt.Errorf("test lease: %w", inventory.ErrLockLost)
	default:
		return nil
	}
}

func (losableHold) Exit(context.Context) error { return nil }
