package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestBurstVerdictsOutliveTheirItemsReset: verdicts come back newest
// first, per kind and item, at most n, as written; a reset of the product,
// which deletes its orders, leaves them.
func TestBurstVerdictsOutliveTheirItemsReset(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			ctx := context.Background()
			// Item ids no other test uses, fresh per run on a shared MySQL.
			item := time.Now().UnixNano() % 1_000_000_000
			at := time.Date(2026, 11, 26, 12, 0, 0, 123456000, time.UTC)
			rec := db.Bursts()
			want := []api.BurstVerdict{
				{At: at, Kind: "product", ItemID: item, Stage: "unlocked", Buyers: 300, InitialStock: 100, Sold: 287, Oversold: 187, ElapsedMS: 712.5, P99MS: 630.25, BuyerP99MS: 700.5},
				{At: at.Add(time.Second), Kind: "product", ItemID: item, Stage: "db-atomic", Buyers: 300, InitialStock: 100, Sold: 100, ElapsedMS: 215, P99MS: 203.5, BuyerP99MS: 210},
				{At: at.Add(2 * time.Second), Kind: "coupon", ItemID: item, Stage: "redis-atomic", Buyers: 50, InitialStock: 10, Sold: 10, ElapsedMS: 50, P99MS: 40},
			}
			for _, v := range want {
				if err := rec.Record(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			if err := rec.Record(ctx, api.BurstVerdict{Kind: "sideways", ItemID: item}); err == nil {
				t.Error("a verdict of an unknown kind was recorded")
			}
			if err := db.Products().Reset(ctx, 1, 100); err != nil {
				t.Fatal(err)
			}
			got, err := rec.Recent(ctx, "product", item, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0] != want[1] || got[1] != want[0] {
				t.Fatalf("product verdicts, newest first:\n got %+v\nwant %+v, %+v", got, want[1], want[0])
			}
			if got, err := rec.Recent(ctx, "product", item, 1); err != nil || len(got) != 1 || got[0] != want[1] {
				t.Errorf("the last one only: %+v %v", got, err)
			}
			if got, err := rec.Recent(ctx, "coupon", item, 10); err != nil || len(got) != 1 || got[0] != want[2] {
				t.Errorf("coupon verdicts: %+v %v", got, err)
			}
		})
	}
}

// TestBurstMarksHoldOneBurstPerItem: one mark per item; a second burst is
// refused while the first's mark has not lapsed, and takes over one that
// has (its instance died); only the mark's own token extends or removes it.
func TestBurstMarksHoldOneBurstPerItem(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			ctx := context.Background()
			item := time.Now().UnixNano() % 1_000_000_000
			marks := db.Bursts()
			now := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
			until := now.Add(30 * time.Second)
			must := func(ok bool, err error) bool {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			marked := func(kind string, now time.Time) (bool, error) {
				_, ok, err := marks.MarkedAny(ctx, kind, []int64{item}, now)
				return ok, err
			}
			if !must(marks.Mark(ctx, "product", item, "first", now, until)) {
				t.Fatal("the first mark of an item was refused")
			}
			if must(marks.Mark(ctx, "product", item, "second", now.Add(time.Second), until.Add(time.Second))) {
				t.Fatal("a second burst marked an item whose first burst's mark has not lapsed")
			}
			if !must(marks.Mark(ctx, "coupon", item, "second", now, until)) {
				t.Fatal("a coupon batch with the product's id was refused: marks are per kind")
			}
			if !must(marked("product", now.Add(time.Second))) {
				t.Fatal("a live mark is not seen")
			}
			if must(marks.Extend(ctx, "product", item, "second", until.Add(time.Minute))) {
				t.Fatal("another burst's token extended the mark")
			}
			if !must(marks.Extend(ctx, "product", item, "first", until.Add(time.Minute))) {
				t.Fatal("the mark's own token could not extend it")
			}
			if !must(marks.Extend(ctx, "product", item, "first", until.Add(time.Minute))) {
				t.Fatal("an extension to the lapse the mark already has was taken for a lost mark")
			}
			lapsed := until.Add(time.Minute)
			if must(marked("product", lapsed)) {
				t.Fatal("a lapsed mark is still seen")
			}
			if !must(marks.Mark(ctx, "product", item, "third", lapsed, lapsed.Add(30*time.Second))) {
				t.Fatal("a lapsed mark (its instance died) was not taken over")
			}
			if err := marks.Unmark(ctx, "product", item, "first"); err != nil {
				t.Fatal(err)
			}
			if !must(marked("product", lapsed)) {
				t.Fatal("the lapsed burst's unmark removed the mark of the burst that took over")
			}
			if err := marks.Unmark(ctx, "product", item, "third"); err != nil {
				t.Fatal(err)
			}
			if must(marked("product", lapsed)) {
				t.Fatal("an unmarked item is still seen marked")
			}
			if err := marks.Unmark(ctx, "coupon", item, "second"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMarkedAnyAsksOnceAThousandItems: whether a burst of any of 2,500
// items is in flight is asked in one query per 1,000 items, and finds the
// one live mark among them wherever it is; a lapsed mark, or one of the
// other kind, is not seen.
func TestMarkedAnyAsksOnceAThousandItems(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			ctx := context.Background()
			base := time.Now().UnixNano()%1_000_000_000 + 1
			ids := make([]int64, 2500)
			for i := range ids {
				ids[i] = base + int64(i)
			}
			marks := db.Bursts()
			now := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
			for _, m := range []struct {
				kind  string
				item  int64
				until time.Time
			}{
				{"product", ids[2100], now.Add(time.Second)}, // live, in the third thousand
				{"product", ids[5], now},                     // lapsed at now
				{"coupon", ids[7], now.Add(time.Minute)},     // another kind
			} {
				if ok, err := marks.Mark(ctx, m.kind, m.item, "t", now.Add(-time.Second), m.until); err != nil || !ok {
					t.Fatalf("mark %s %d: %v %v", m.kind, m.item, ok, err)
				}
				t.Cleanup(func() { _ = marks.Unmark(context.Background(), m.kind, m.item, "t") })
			}
			wire := store.RecordWire(db)
			id, ok, err := marks.MarkedAny(ctx, "product", ids, now)
			if err != nil || !ok || id != ids[2100] {
				t.Fatalf("MarkedAny of 2,500 items: %d %v %v, want item %d marked", id, ok, err, ids[2100])
			}
			if got := wire.Take(); len(got) != 3 {
				t.Errorf("MarkedAny of 2,500 items sent %d statements, want 3 (one per 1,000 ids)", len(got))
			}
			if id, ok, err := marks.MarkedAny(ctx, "product", ids[:2000], now); err != nil || ok {
				t.Errorf("MarkedAny without the live mark: %d %v %v, want none (a lapsed mark and a coupon's are not the products')", id, ok, err)
			}
			if got := wire.Take(); len(got) != 2 {
				t.Errorf("MarkedAny of 2,000 items sent %d statements, want 2", len(got))
			}
		})
	}
}
