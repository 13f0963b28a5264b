package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// The many scenario: a catalogue of products on sale at once (a session,
// 场次), and a flash crowd in which each buyer chooses one product by a
// Zipf law. It is fired like buy, by vegeta's attacker through --workers,
// and judged per product (verdict/many.go).

// ManyFirstID is the id of the many scenario's hottest product; its
// products are ManyFirstID to ManyFirstID + products - 1, far from the
// seed's products (1 and 2) and from the test catalogues of `seckill
// catalogue` (ids 1 to N).
const ManyFirstID = 900_001

// CheckMany says what is wrong with c's many scenario, or returns nil.
func CheckMany(c Config) error {
	switch {
	case c.ManyProducts < 1 || c.ManyProducts > inventory.MaxSessionItems:
		return fmt.Errorf("--many-products must be 1 to %d (one session), not %d", inventory.MaxSessionItems, c.ManyProducts)
	case c.ManyStock < 0:
		return fmt.Errorf("--many-stock must not be negative")
	case c.ManyBuyers < 1:
		return fmt.Errorf("--many-buyers must be at least 1")
	}
	return nil
}

// ManyZipfS is the Zipf law's exponent: the classic 1, a few hot items
// and a long tail.
const ManyZipfS = 1.0

// manyCrowd fires the crowd at the products Scenario.SetUp created or
// restocked, and audits each of them.
type manyCrowd struct{}

func (manyCrowd) Attack(ctx context.Context, c Config, f *fleet.Fleet, p Plan, pl *plot.Plot, progress io.Writer) (Result, error) {
	m := newMany(c) // its products were set up before the attack (Scenario.SetUp)
	picks := NewZipf(m.Products, m.Exponent, m.Seed).Picks(m.Buyers)
	for _, rank := range picks {
		m.Items[rank].Buyers++
	}
	p.pick = func(buyer uint64) int64 { return m.FirstID + int64(picks[buyer%uint64(len(picks))]) }
	mc := c
	mc.Buyers = m.Buyers
	// The same cap per buyer as buy's: a crowd ten times buy's may take
	// ten times as long.
	mc.MaxDuration = max(c.MaxDuration, time.Duration(float64(c.MaxDuration)*float64(m.Buyers)/float64(max(1, c.Buyers))))
	res, err := attack(ctx, mc, p, pl, progress)
	if err != nil {
		return res, err
	}
	if err := auditMany(ctx, f, p.Stage, c.Timeout, m, res); err != nil {
		return res, fmt.Errorf("many: %w", err)
	}
	res.Many = m
	return res, nil
}

// newMany is the scenario's products, hottest first, before the attack.
func newMany(c Config) *results.Many {
	m := &results.Many{Products: c.ManyProducts, StockEach: c.ManyStock, FirstID: ManyFirstID, Buyers: c.ManyBuyers,
		Exponent: ManyZipfS, Seed: uint64(c.ManySeed), Items: make([]results.ManyItem, c.ManyProducts)}
	for i := range m.Items {
		m.Items[i] = results.ManyItem{ID: m.FirstID + int64(i), Stock: c.ManyStock}
	}
	return m
}

// setUpMany creates the products the targets lack, with their stock and
// no orders, and restocks those that existed with sessions.
func setUpMany(ctx context.Context, f *fleet.Fleet, m *results.Many) error {
	ids := make([]int64, len(m.Items))
	for i, it := range m.Items {
		ids[i] = it.ID
	}
	existed, err := f.EnsureProducts(ctx, ids, m.StockEach)
	if err != nil || len(existed) == 0 {
		return err
	}
	items := make([]api.SessionItem, len(existed))
	for i, id := range existed {
		items[i] = api.SessionItem{ID: id, Stock: m.StockEach}
	}
	return f.Session(ctx, items, manySessionItems, manySessionAttempts)
}

// A session of 200 products outlasts its request deadline (4 s by
// default) on an instance whose background work grows with the catalogue
// (issue 60): the lab sends them in sessions of manySessionItems, each
// up to manySessionAttempts times.
const (
	manySessionItems    = 20
	manySessionAttempts = 3
)

// manyAuditTries is how many times a product's audit is read while its
// targets' audits disagree.
const manyAuditTries = 3

// manyDrainWait bounds the wait, under a stage that queues its orders,
// for each product's queue to drain before its audit is read.
const manyDrainWait = time.Minute

// auditMany reads every product's audit (through every target, which must
// agree) into m, with what the attack saw of it: its requests, its sales
// and its refusals while its stock remained.
func auditMany(ctx context.Context, f *fleet.Fleet, stage string, timeout time.Duration, m *results.Many, res Result) error {
	deadline := time.Now().Add(manyDrainWait)
	settle := time.Duration(0)
	if res.Unanswered() > 0 {
		settle = 2 * timeout // the hottest product first: stragglers are mostly its
	}
	for i := range m.Items {
		it := &m.Items[i]
		item := fleet.Item{ID: it.ID}
		if inventory.Queues(stage) {
			if err := waitDrained(ctx, f, item, deadline); err != nil {
				return err
			}
		}
		a, err := f.SettledAudit(ctx, item, settle)
		for try := 1; errors.Is(err, fleet.ErrAuditsDisagree) && try < manyAuditTries; try++ {
			// Read one after another while the item moved: a reload of
			// its copy (the reconcile job's) clears the give-back log.
			// Twice in a row is a fleet that does not share one store.
			time.Sleep(250 * time.Millisecond)
			a, err = f.SettledAudit(ctx, item, settle)
		}
		if err != nil {
			return fmt.Errorf("auditing product %d: %w", it.ID, err)
		}
		settle = 0
		fillManyItem(it, a, res.tally.items[it.ID])
	}
	return nil
}

// waitDrained polls the item's audit until it has no pending order, or
// the deadline passed (the unconfirmed rule then judges what is left).
func waitDrained(ctx context.Context, f *fleet.Fleet, it fleet.Item, deadline time.Time) error {
	for {
		a, err := f.AuditOn(ctx, f.Targets[0], it)
		if err != nil || a.PendingOrders == 0 || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fillManyItem copies the product's audit and its answers into it.
func fillManyItem(it *results.ManyItem, a api.Audit, t *itemTally) {
	it.Stock, it.Sold, it.FinalStock, it.Oversold, it.Conserved = a.InitialStock, a.Sold, a.Stock, a.Oversold, a.Conserved
	for _, g := range a.GivenBack {
		it.GivenBack += g.Units
	}
	if t == nil {
		return
	}
	it.Sent, it.Created, it.SoldOut = t.sent, t.created, len(t.soldOutAt)
	// The tally's rules, over this product's answers alone.
	one := tally{soldOutAt: t.soldOutAt, lastOrder: t.lastOrder}
	it.RefusedWithStock, it.RefusedWithStockNet = one.refusedWithStock(), one.refusedWithStockNet(a.GivenBack)
}

// itemTally is what one product's answers said.
type itemTally struct {
	sent, created int
	soldOutAt     []time.Time // when each sold-out answer was received
	lastOrder     time.Time   // the latest created_at of its orders
}

// addItem counts r for the product its URL names.
func (t *tally) addItem(r *vegeta.Result, a answer) {
	id, ok := productOf(r.URL)
	if !ok {
		return
	}
	it := t.items[id]
	if it == nil {
		it = &itemTally{}
		t.items[id] = it
	}
	it.sent++
	switch a.outcome {
	case outCreated:
		it.created++
		if a.createdAt.After(it.lastOrder) {
			it.lastOrder = a.createdAt
		}
	case outSoldOut:
		it.soldOutAt = append(it.soldOutAt, r.End())
	}
}

// productOf reads the product id of a buy's URL (…/products/{id}/buy).
func productOf(url string) (int64, bool) {
	_, rest, ok := strings.Cut(url, "/products/")
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, "/")
	id, err := strconv.ParseInt(digits, 10, 64)
	return id, err == nil
}

// fillMany makes r's counts the sums over m's products (results.Many.Sum).
func fillMany(r *results.Row, m *results.Many) {
	r.Many = m
	m.Sum(r)
}
