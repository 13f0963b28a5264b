package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// countedMarks are burst marks in memory that count how often they are
// read: each read is a query to the shared database in store.Bursts.
type countedMarks struct {
	mu     sync.Mutex
	marked map[int64]bool // products whose burst is in flight
	reads  int
}

func (m *countedMarks) Mark(context.Context, string, int64, string, time.Time, time.Time) (bool, error) {
	return false, fmt.Errorf("not called")
}

func (m *countedMarks) Extend(context.Context, string, int64, string, time.Time) (bool, error) {
	return false, fmt.Errorf("not called")
}

func (m *countedMarks) Unmark(context.Context, string, int64, string) error {
	return fmt.Errorf("not called")
}

func (m *countedMarks) MarkedAny(_ context.Context, kind string, itemIDs []int64, _ time.Time) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	for _, id := range itemIDs {
		if kind == "product" && m.marked[id] {
			return id, true, nil
		}
	}
	return 0, false, nil
}

// takeReads returns the reads since the last take.
func (m *countedMarks) takeReads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.reads
	m.reads = 0
	return n
}

// sessionOfItems makes products 1 to n exist (the seed has 1 and 2, the
// others are created with stock 5) and returns a session body restocking
// each with stock.
func sessionOfItems(t *testing.T, db *store.DB, n, stock int) string {
	t.Helper()
	items := make([]string, n)
	for i := range items {
		id := int64(i + 1)
		if id > 2 {
			if _, err := db.Products().Put(context.Background(), inventory.Listing{ID: id, Name: fmt.Sprintf("item %d", id), PriceCents: 100, Stock: 5}); err != nil {
				t.Fatal(err)
			}
		}
		items[i] = fmt.Sprintf(`{"id":%d,"stock":%d}`, id, stock)
	}
	return `{"items":[` + strings.Join(items, ",") + `]}`
}

// TestSessionReadsTheBurstMarksOnceForAllItsItems: a session asks the
// shared database whether a burst of any of its items is in flight in one
// read, as many for 200 items as for one. Asked item by item, a 1,000-item
// session spent half its request deadline before its commit.
func TestSessionReadsTheBurstMarksOnceForAllItsItems(t *testing.T) {
	db := testenv.SQLite(t)
	marks := &countedMarks{}
	f := catalogueFixtureMarked(t, db, marks)
	reads := map[int]int{}
	for _, n := range []int{1, 200} {
		body := sessionOfItems(t, db, n, 7)
		marks.takeReads()
		if rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/sessions", body: body})); rec.Code != http.StatusOK {
			t.Fatalf("a session of %d items: %d %s", n, rec.Code, rec.Body)
		}
		reads[n] = marks.takeReads()
	}
	if reads[1] < 1 || reads[200] != reads[1] {
		t.Errorf("the burst marks were read %d times for a session of 1 item and %d times for 200 items; want the same, at least once", reads[1], reads[200])
	}
}

// TestBurstOfOneItemRefusesTheWholeSession: a burst in flight on item 137
// of a 200-item session refuses the session 409 burst-in-progress, and
// nothing of it is written: no item restocked, no order deleted.
func TestBurstOfOneItemRefusesTheWholeSession(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			marks := &countedMarks{marked: map[int64]bool{137: true}}
			f := catalogueFixtureMarked(t, db, marks)
			body := sessionOfItems(t, db, 200, 9)
			if rec := f.do(call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"before"}`}); rec.Code != http.StatusCreated {
				t.Fatalf("buy: %d %s", rec.Code, rec.Body)
			}
			rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/sessions", body: body}))
			if rec.Code != http.StatusConflict || problemType(t, rec) != "burst-in-progress" {
				t.Fatalf("a session with a burst in flight on one item: %d %s, want 409 burst-in-progress", rec.Code, rec.Body)
			}
			for id := int64(1); id <= 200; id++ {
				stock, initial := 5, 5
				switch id {
				case 1:
					stock, initial = 99, 100 // its order is kept
				case 2:
					stock, initial = 50, 50
				}
				p, code := f.product(id)
				if code != http.StatusOK || p.Stock != stock || p.InitialStock != initial || p.OpensAt != nil {
					t.Errorf("product %d after the refused session: %d %+v, want stock %d of %d as before", id, code, p, stock, initial)
				}
			}
		})
	}
}
