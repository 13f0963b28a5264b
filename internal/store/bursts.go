package store

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// Bursts is the record of burst verdicts (sql/*/005_burst_verdicts.sql):
// written once per burst, never changed by a reset or a cancellation.
type Bursts struct{ db *DB }

// Bursts returns the burst-verdict record.
func (d *DB) Bursts() *Bursts { return &Bursts{db: d} }

// burstRow is one row of burst_verdicts.
type burstRow struct {
	ID           int64
	Kind         string
	ItemID       int64
	Stage        string
	Buyers       int
	InitialStock int
	Sold         int
	Oversold     int
	ElapsedMS    float64
	P99MS        float64
	AtUS         int64
}

// Record appends v.
func (b *Bursts) Record(ctx context.Context, v api.BurstVerdict) error {
	if v.Kind != "product" && v.Kind != "coupon" {
		return fmt.Errorf("burst verdict of unknown kind %q", v.Kind)
	}
	err := b.db.gdb.WithContext(ctx).Exec(
		"INSERT INTO burst_verdicts (kind, item_id, stage, buyers, initial_stock, sold, oversold, elapsed_ms, p99_ms, at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		v.Kind, v.ItemID, v.Stage, v.Buyers, v.InitialStock, v.Sold, v.Oversold, v.ElapsedMS, v.P99MS, v.At.UnixMicro()).Error
	return translate(err)
}

// Recent returns the item's last n verdicts, newest first.
func (b *Bursts) Recent(ctx context.Context, kind string, itemID int64, n int) ([]api.BurstVerdict, error) {
	var rows []burstRow
	err := b.db.gdb.WithContext(ctx).Raw(
		"SELECT id, kind, item_id, stage, buyers, initial_stock, sold, oversold, elapsed_ms, p99_ms, at_us FROM burst_verdicts WHERE kind = ? AND item_id = ? ORDER BY id DESC LIMIT ?",
		kind, itemID, n).Scan(&rows).Error
	if err != nil {
		return nil, translate(err)
	}
	out := make([]api.BurstVerdict, len(rows))
	for i, r := range rows {
		out[i] = api.BurstVerdict{Kind: r.Kind, ItemID: r.ItemID, Stage: r.Stage, Buyers: r.Buyers, InitialStock: r.InitialStock,
			Sold: r.Sold, Oversold: r.Oversold, ElapsedMS: r.ElapsedMS, P99MS: r.P99MS, At: time.UnixMicro(r.AtUS).UTC()}
	}
	return out, nil
}
