package admission_test

import (
	"context"
	"errors"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// BenchmarkFirstLateBuyer times instance B's first late buyer of an item
// that instance A sold out, under redis-atomic, and counts the Redis
// commands it sends: "learnt" has the stages wrapped without names (as
// before sell-outs were announced), so B's buyer runs the stock script and
// learns it there; "pushed" has B answer from the memory A's announcement
// filled. Each op is a new item: B has read its epoch (as a buyer during
// the sale would), A sold its one unit and A's first late buyer heard
// "sold out" from the stage; only B's first late buyer is timed.
func BenchmarkFirstLateBuyer(b *testing.B) {
	for _, mode := range []struct {
		name  string
		named bool
	}{{"learnt", false}, {"pushed", true}} {
		b.Run(mode.name, func(b *testing.B) {
			const stage = inventory.StageRedisAtomic
			a, late := newPushFleetWrapped(b, stage, 1, mode.named)
			ctx := context.Background()
			var cmds int64
			b.StopTimer()
			if _, err := a.db.Products().LoadCatalogue(ctx, b.N+2, 1); err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				id := int64(i + 2)
				if err := a.db.Products().Reset(ctx, id, 1); err != nil {
					b.Fatal(err)
				}
				if _, err := late.svc.PeekMemory(ctx, stage, id); err != nil {
					b.Fatal(err)
				}
				if err := a.buyOf(id, stage, "a-last"); err != nil {
					b.Fatal(err)
				}
				a.lateUntilSoldOut(b, id)
				if mode.named {
					late.waitHeard(b, true, "B")
				}
				sent := late.sent.Sent()
				b.StartTimer()
				err := late.buyOf(id, stage, "b-late")
				b.StopTimer()
				cmds += late.sent.Sent() - sent
				if !errors.Is(err, inventory.ErrSoldOut) {
					b.Fatalf("B's first late buyer: %v, want sold out", err)
				}
			}
			b.ReportMetric(float64(cmds)/float64(b.N), "redis-cmds/op")
		})
	}
}
