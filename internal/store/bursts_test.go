package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
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
				{At: at, Kind: "product", ItemID: item, Stage: "unlocked", Buyers: 300, InitialStock: 100, Sold: 287, Oversold: 187, ElapsedMS: 712.5, P99MS: 630.25},
				{At: at.Add(time.Second), Kind: "product", ItemID: item, Stage: "db-atomic", Buyers: 300, InitialStock: 100, Sold: 100, ElapsedMS: 215, P99MS: 203.5},
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
