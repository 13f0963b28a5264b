package admission_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
)

// clockedStage is a stage that checks the window by a clock of its own,
// as the Redis stages check it by Redis's TIME.
type clockedStage struct {
	stageFunc
	now func() time.Time
}

func (s clockedStage) WindowNow(context.Context, int64) (time.Time, error) { return s.now(), nil }

var _ inventory.WindowClock = clockedStage{}

// TestDrawPlacesTheOpeningByTheStagesOwnClock: the database's clock, which
// the catalog reads, and Redis's, which the Redis stages check the window
// against, are 500 ms apart (Redis ahead). A buyer who comes 100 ms after
// the opening by Redis's clock, 400 ms before it by the database's, is
// sold to by a Redis stage: the draw must hold that buyer as one of the
// opening's, by Redis's clock. A buyer of a stage that checks by the
// database's clock at the same moment is before the opening, and is not
// held (the stage refuses it).
func TestDrawPlacesTheOpeningByTheStagesOwnClock(t *testing.T) {
	const skew = 500 * time.Millisecond
	start := time.Unix(1_000, 0)                            // this instance's clock at the rig's start
	dbStart := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC) // the database's clock then
	opens := dbStart.Add(10 * time.Second)
	var mu sync.Mutex
	now := start
	held := map[string]time.Duration{}
	var reached []string
	elapsed := func() time.Duration { mu.Lock(); defer mu.Unlock(); return now.Sub(start) }
	d := admission.NewDraw(admission.DrawOptions{
		Span:    func() time.Duration { return time.Second },
		Opening: func(context.Context, int64) (time.Time, error) { return opens, nil },
		RefNow:  func(context.Context) (time.Time, error) { return dbStart.Add(elapsed()), nil },
		Now:     func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Rand:    func() float64 { return 0.5 },
		Sleep: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			held[userOf(ctx)] = d
			return nil
		},
	})
	c := admission.NewCrowd(admission.CrowdOptions{Kind: "product", Epochs: &memEpochs{}, Draw: d})
	record := stageFunc(func(_ context.Context, o inventory.Order) error {
		mu.Lock()
		defer mu.Unlock()
		reached = append(reached, o.UserID)
		return nil
	})
	redisStage := c.Wrap(clockedStage{stageFunc: record, now: func() time.Time { return dbStart.Add(skew + elapsed()) }})
	dbStage := c.Wrap(record)

	mu.Lock()
	now = start.Add(10*time.Second - skew + 100*time.Millisecond) // 100 ms after the opening by Redis's clock
	mu.Unlock()
	for user, st := range map[string]inventory.Stage{"redis-buyer": redisStage, "db-buyer": dbStage} {
		if err := st.Buy(context.WithValue(context.Background(), userKey{}, user), inventory.Order{ItemID: 1, UserID: user, Quantity: 1}); err != nil {
			t.Fatalf("%s: %v", user, err)
		}
	}
	// By Redis's clock the opening was 100 ms ago: held to the draw's end
	// (1 s after it) plus half a span: 1.4 s.
	if got, ok := held["redis-buyer"]; !ok || got != 1400*time.Millisecond {
		t.Errorf("the buyer of a stage that goes by Redis's clock, 100 ms after its opening (%v before the database's): held %v (held: %t); want 1.4s, as one of the opening's buyers", skew-100*time.Millisecond, got, ok)
	}
	if got, ok := held["db-buyer"]; ok {
		t.Errorf("the buyer of a stage that goes by the database's clock, 400 ms before its opening, was held %v; want not held (the stage refuses it)", got)
	}
	if len(reached) != 2 {
		t.Errorf("stage reached by %v; want both buyers", reached)
	}
}

// TestDrawReadsTheOpeningOnceForTheCrowdAfterAReset: after a reset (a new
// epoch) a crowd of buyers arrives at once, none of whom finds the
// opening this instance knew. They share one read of the opening and of
// the reference clock: the read is held until every buyer of the crowd
// has passed the rate limit, the step before the draw, so that all of them
// look for the opening while it runs.
func TestDrawReadsTheOpeningOnceForTheCrowdAfterAReset(t *testing.T) {
	const crowd = 50
	epochs := &memEpochs{}
	opens := time.Unix(100, 0)
	var mu sync.Mutex
	var openingReads, clockReads, admitted int
	everyone := make(chan struct{}) // closed when the whole crowd is admitted
	holdReads := false
	d := admission.NewDraw(admission.DrawOptions{
		Span: func() time.Duration { return time.Second },
		Opening: func(context.Context, int64) (time.Time, error) {
			mu.Lock()
			defer mu.Unlock()
			openingReads++
			return opens, nil
		},
		RefNow: func(context.Context) (time.Time, error) {
			mu.Lock()
			clockReads++
			wait := holdReads
			mu.Unlock()
			if wait {
				<-everyone
			}
			return opens, nil // read at the opening
		},
		Now:   func() time.Time { return time.Unix(0, 0) },
		Sleep: func(context.Context, time.Duration) error { return nil },
	})
	c := admission.NewCrowd(admission.CrowdOptions{Kind: "product", Epochs: epochs, Draw: d,
		Admit: func(context.Context, inventory.Order) error {
			mu.Lock()
			defer mu.Unlock()
			admitted++
			if holdReads && admitted == crowd {
				close(everyone)
			}
			return nil
		}})
	stage := c.Wrap(stageFunc(func(context.Context, inventory.Order) error { return nil }))
	buy := func(user string) error {
		return stage.Buy(context.Background(), inventory.Order{ItemID: 1, UserID: user, Quantity: 1})
	}
	if err := buy("before-the-reset"); err != nil {
		t.Fatal(err)
	}
	if openingReads != 1 || clockReads != 1 {
		t.Fatalf("one buyer: %d reads of the opening, %d of the clock; want 1 and 1", openingReads, clockReads)
	}
	if err := epochs.Bump(context.Background(), "product:1"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	openingReads, clockReads, admitted, holdReads = 0, 0, 0, true
	mu.Unlock()
	start := make(chan struct{})
	errs := make(chan error, crowd)
	for i := range crowd {
		go func() {
			<-start
			errs <- buy("crowd-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		}()
	}
	close(start)
	for range crowd {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if openingReads != 1 || clockReads != 1 {
		t.Fatalf("a crowd of %d after a reset: %d reads of the opening, %d of the reference clock; want one each", crowd, openingReads, clockReads)
	}
}
