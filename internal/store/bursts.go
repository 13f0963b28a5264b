package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
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
	BuyerP99MS   float64 `gorm:"column:buyer_p99_ms"`
	AtUS         int64
}

// Record appends v.
func (b *Bursts) Record(ctx context.Context, v api.BurstVerdict) error {
	if v.Kind != "product" && v.Kind != "coupon" {
		return fmt.Errorf("burst verdict of unknown kind %q", v.Kind)
	}
	err := b.db.gdb.WithContext(ctx).Exec(
		"INSERT INTO burst_verdicts (kind, item_id, stage, buyers, initial_stock, sold, oversold, elapsed_ms, p99_ms, buyer_p99_ms, at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		v.Kind, v.ItemID, v.Stage, v.Buyers, v.InitialStock, v.Sold, v.Oversold, v.ElapsedMS, v.P99MS, v.BuyerP99MS, v.At.UnixMicro()).Error
	return translate(err)
}

// Recent returns the item's last n verdicts, newest first.
func (b *Bursts) Recent(ctx context.Context, kind string, itemID int64, n int) ([]api.BurstVerdict, error) {
	var rows []burstRow
	err := b.db.gdb.WithContext(ctx).Raw(
		"SELECT id, kind, item_id, stage, buyers, initial_stock, sold, oversold, elapsed_ms, p99_ms, buyer_p99_ms, at_us FROM burst_verdicts WHERE kind = ? AND item_id = ? ORDER BY id DESC LIMIT ?",
		kind, itemID, n).Scan(&rows).Error
	if err != nil {
		return nil, translate(err)
	}
	out := make([]api.BurstVerdict, len(rows))
	for i, r := range rows {
		out[i] = api.BurstVerdict{Kind: r.Kind, ItemID: r.ItemID, Stage: r.Stage, Buyers: r.Buyers, InitialStock: r.InitialStock,
			Sold: r.Sold, Oversold: r.Oversold, ElapsedMS: r.ElapsedMS, P99MS: r.P99MS, BuyerP99MS: r.BuyerP99MS, At: time.UnixMicro(r.AtUS).UTC()}
	}
	return out, nil
}

// The marks of bursts in flight (sql/*/008_burst_runs.sql). Times are the
// caller's: until_us is compared with the now of whoever reads it, so
// instances whose clocks disagree by d see a mark lapse up to d early or
// late; the mark's lifetime (seconds, renewed while the burst runs) is
// chosen far above any skew a fleet runs with.

// Mark marks the item's burst in flight under token until until. It
// reports false, writing nothing, when another burst's mark is there and
// has not lapsed by now; a lapsed mark (its burst's instance died) is
// replaced.
func (b *Bursts) Mark(ctx context.Context, kind string, itemID int64, token string, now, until time.Time) (bool, error) {
	gdb := b.db.gdb.WithContext(ctx)
	if err := gdb.Exec("DELETE FROM burst_runs WHERE kind = ? AND item_id = ? AND until_us <= ?", kind, itemID, now.UnixMicro()).Error; err != nil {
		return false, translate(err)
	}
	err := gdb.Exec("INSERT INTO burst_runs (kind, item_id, token, until_us) VALUES (?, ?, ?, ?)", kind, itemID, token, until.UnixMicro()).Error
	if err == nil {
		return true, nil
	}
	if err = translate(err); errors.Is(err, inventory.ErrAlreadyPurchased) {
		return false, nil // a duplicate key: another burst's mark
	}
	return false, err
}

// Extend moves the lapse of the item's mark under token to until. It
// reports false when the mark is no longer token's (it lapsed and another
// burst took it, or it was removed).
func (b *Bursts) Extend(ctx context.Context, kind string, itemID int64, token string, until time.Time) (bool, error) {
	res := b.db.gdb.WithContext(ctx).Exec("UPDATE burst_runs SET until_us = ? WHERE kind = ? AND item_id = ? AND token = ?", until.UnixMicro(), kind, itemID, token)
	if res.Error != nil {
		return false, translate(res.Error)
	}
	if res.RowsAffected > 0 {
		return true, nil
	}
	// MySQL counts a row whose value did not change as unaffected: an
	// extension to the very microsecond it had is still the mark's.
	var n int64
	err := b.db.gdb.WithContext(ctx).Raw("SELECT COUNT(*) FROM burst_runs WHERE kind = ? AND item_id = ? AND token = ?", kind, itemID, token).Scan(&n).Error
	return n > 0, translate(err)
}

// Unmark removes the item's mark if it is still token's.
func (b *Bursts) Unmark(ctx context.Context, kind string, itemID int64, token string) error {
	return translate(b.db.gdb.WithContext(ctx).Exec("DELETE FROM burst_runs WHERE kind = ? AND item_id = ? AND token = ?", kind, itemID, token).Error)
}

// MarkedAny reports whether a burst of any of the items is in flight (a
// mark that has not lapsed by now), and one such item. It asks in one
// query per markedChunk items, so a session of many items costs a
// round trip or two, not one per item.
func (b *Bursts) MarkedAny(ctx context.Context, kind string, itemIDs []int64, now time.Time) (itemID int64, marked bool, err error) {
	for chunk := range slices.Chunk(itemIDs, markedChunk) {
		var found []int64
		err := b.db.gdb.WithContext(ctx).Raw("SELECT item_id FROM burst_runs WHERE kind = ? AND until_us > ? AND item_id IN ? LIMIT 1",
			kind, now.UnixMicro(), chunk).Scan(&found).Error
		if err != nil {
			return 0, false, translate(err)
		}
		if len(found) > 0 {
			return found[0], true, nil
		}
	}
	return 0, false, nil
}

// markedChunk bounds the ids of one MarkedAny query: a session's 1,000
// fit one, and a longer list stays well inside the statement limits of
// both engines (SQLite's bound parameters, MySQL's max_allowed_packet).
const markedChunk = 1000
