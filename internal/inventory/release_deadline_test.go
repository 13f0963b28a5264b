package inventory_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// stuckExitGuard is a guard whose release gets no answer until released,
// as a lock's release does from a Redis that stopped answering.
type stuckExitGuard struct {
	exiting atomic.Int32 // releases waiting now
	release chan struct{}
}

func (g *stuckExitGuard) Enter(context.Context, string, time.Time) (inventory.Held, error) {
	return stuckHold{g}, nil
}

type stuckHold struct{ g *stuckExitGuard }

func (stuckHold) Token() int64                                { return 0 }
func (stuckHold) Context(ctx context.Context) context.Context { return ctx }
func (stuckHold) Err() error                                  { return nil }
func (h stuckHold) Exit(context.Context) error {
	h.g.exiting.Add(1)
	defer h.g.exiting.Add(-1)
	<-h.g.release
	return nil
}

// TestReleaseDoesNotHoldTheAnswerPastTheDeadline: a lock stage's buy
// whose deadline passed inside its critical section gives its lock up
// apart from the request's cancellation. When the release gets no answer
// (Redis stopped), the buyer must still hear its answer at the deadline
// (and a short grace), not wait for the release: on serve, with Redis
// SIGSTOPped mid-sale, redis-lock buyers under a 4 s deadline were
// answered after 6.1 s. The release still ends once it is answered.
func TestReleaseDoesNotHoldTheAnswerPastTheDeadline(t *testing.T) {
	db := testenv.SQLite(t)
	if err := db.Products().Reset(context.Background(), 1, 5); err != nil {
		t.Fatal(err)
	}
	guard := &stuckExitGuard{release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-guard.release:
		default:
			close(guard.release)
		}
	})
	cue := testkit.NewCueDeadline()
	stage := inventory.NewGuarded(guard, db.Products(), "product", inventory.SectionOptions{
		// The deadline passes inside the section.
		BetweenReadAndWrite: func(context.Context, inventory.Order) { cue.Fall() },
	})
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"guarded": stage}, "a", "O")
	answered := make(chan error, 1)
	go func() {
		_, err := svc.Buy(cue, "guarded", inventory.Request{ItemID: 1, UserID: "late", Quantity: 1})
		answered <- err
	}()
	select {
	case <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("the buyer was still unanswered while its lock's release waited for an answer")
	}
	if guard.exiting.Load() == 0 {
		t.Fatal("the release ended before the buyer was answered: the test did not force the step")
	}
	close(guard.release)
	testkit.Eventually(t, "the release ends", 30*time.Second, func() bool { return guard.exiting.Load() == 0 })
}
