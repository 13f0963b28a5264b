package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// catalogueFixture is a server over db with db-atomic, and redis-atomic
// (behind a crowd) on a Redis of the test's own keys.
func catalogueFixture(t *testing.T, db *store.DB) *fixture {
	t.Helper()
	return catalogueFixtureMarked(t, db, nil)
}

// catalogueFixtureMarked is catalogueFixture whose bursts are marked in
// marks.
func catalogueFixtureMarked(t *testing.T, db *store.DB, marks httpapi.BurstMarks) *fixture {
	t.Helper()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("catalogue")
	stages := func(st *store.Ledger, kind string) (map[string]inventory.Stage, *admission.Crowd) {
		crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: kind})
		return map[string]inventory.Stage{
			"db-atomic":    inventory.NewDBAtomic(st),
			"redis-atomic": crowd.Wrap(redisstage.NewRedisAtomic(rdb, st, prefix+kind, nil)),
		}, crowd
	}
	ps, pc := stages(db.Products(), "product")
	cs, cc := stages(db.Coupons(), "coupon")
	srv := httpapi.NewServer(httpapi.Deps{
		Instance:   "cat-1",
		Products:   inventory.NewService(db.Products(), ps, "cat-1", "O").WithCrowd(pc),
		Coupons:    inventory.NewService(db.Coupons(), cs, "cat-1", "C").WithCrowd(cc),
		AdminToken: token,
		Stage:      "db-atomic",
		Dashboard:  httpapi.Dashboard{Marks: marks},
	})
	return &fixture{t: t, db: db, srv: srv}
}

// product reads a product through the API, with its status.
func (f *fixture) product(id int64) (api.Product, int) {
	f.t.Helper()
	rec := f.do(call{method: "GET", path: fmt.Sprintf("/api/v1/products/%d", id)})
	var p api.Product
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			f.t.Fatal(err)
		}
	}
	return p, rec.Code
}

func detail(t *testing.T, body []byte) string {
	t.Helper()
	var p api.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	return p.Detail
}

func sessionBody(n int, opens, closes string, bad func(i int) string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"id":%d,"stock":5}`, i+1)
		if bad != nil {
			if b := bad(i); b != "" {
				items[i] = b
			}
		}
	}
	return `{"opens_at":"` + opens + `","closes_at":"` + closes + `","items":[` + strings.Join(items, ",") + `]}`
}

func TestCatalogueRefusesBadInputNamingTheFieldAndAppliesNothing(t *testing.T) {
	opens := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	closes := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	before := time.Now().Add(30 * time.Minute).UTC().Format(time.RFC3339)
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := catalogueFixture(t, b.Open(t))
			for _, tc := range []struct {
				name, method, path, body, field string
			}{
				{"negative stock", "PUT", "/api/v1/admin/products/900", `{"name":"a","price_cents":1,"stock":-1}`, "stock"},
				{"negative price", "PUT", "/api/v1/admin/products/900", `{"name":"a","price_cents":-5,"stock":1}`, "price_cents"},
				{"name over 128 characters", "PUT", "/api/v1/admin/products/900", `{"name":"` + strings.Repeat("ß", 129) + `","price_cents":1,"stock":1}`, "name"},
				{"control character in the name", "PUT", "/api/v1/admin/products/900", `{"name":"a\u0000b","price_cents":1,"stock":1}`, "name"},
				{"no name", "PUT", "/api/v1/admin/products/900", `{"price_cents":1,"stock":1}`, "name"},
				{"no price", "PUT", "/api/v1/admin/products/900", `{"name":"a","stock":1}`, "price_cents"},
				{"negative coupon total", "PUT", "/api/v1/admin/coupons/900", `{"name":"a","total":-1}`, "total"},
				{"coupon name with a newline", "PUT", "/api/v1/admin/coupons/900", `{"name":"a\nb","total":1}`, "name"},
				{"close before open", "POST", "/api/v1/admin/sessions", sessionBody(2, closes, opens, nil), "closes_at"},
				{"close at the open", "POST", "/api/v1/admin/sessions", sessionBody(2, opens, opens, nil), "closes_at"},
				{"more than 1000 items", "POST", "/api/v1/admin/sessions", sessionBody(1001, opens, closes, nil), "items"},
				{"no items", "POST", "/api/v1/admin/sessions", `{"items":[]}`, "items"},
				{"one item with negative stock", "POST", "/api/v1/admin/sessions", sessionBody(2, opens, closes, func(i int) string {
					if i == 1 {
						return `{"id":2,"stock":-3}`
					}
					return ""
				}), "items[1].stock"},
				{"one item that does not exist", "POST", "/api/v1/admin/sessions", sessionBody(2, before, closes, func(i int) string {
					if i == 1 {
						return `{"id":4242,"stock":3}`
					}
					return ""
				}), "items[1].id"},
				{"one item without stock", "POST", "/api/v1/admin/sessions", sessionBody(2, opens, closes, func(i int) string {
					if i == 0 {
						return `{"id":1}`
					}
					return ""
				}), "items[0].stock"},
				{"unknown kind", "POST", "/api/v1/admin/sessions", `{"kind":"ticket","items":[{"id":1,"stock":1}]}`, "kind"},
			} {
				rec := f.do(admin(call{method: tc.method, path: tc.path, body: tc.body}))
				if rec.Code != http.StatusBadRequest || problemType(t, rec) != "invalid-request" {
					t.Errorf("%s: %d %s; want 400 invalid-request", tc.name, rec.Code, rec.Body)
					continue
				}
				if d := detail(t, rec.Body.Bytes()); !strings.Contains(d, tc.field) {
					t.Errorf("%s: detail %q does not name %s", tc.name, d, tc.field)
				}
			}
			// Nothing was applied: no item 900, and the seed as it was.
			if _, code := f.product(900); code != http.StatusNotFound {
				t.Errorf("product 900: %d, want 404", code)
			}
			if rec := f.do(call{method: "GET", path: "/api/v1/coupons/900"}); rec.Code != http.StatusNotFound {
				t.Errorf("coupon 900: %d, want 404", rec.Code)
			}
			for id, stock := range map[int64]int{1: 100, 2: 50} {
				p, _ := f.product(id)
				if p.Stock != stock || p.OpensAt != nil || p.ClosesAt != nil {
					t.Errorf("product %d changed by a refused request: %+v", id, p)
				}
			}
		})
	}
}

func TestPutTwiceAnswersTheSameItem(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := catalogueFixture(t, b.Open(t))
			put := admin(call{method: "PUT", path: "/api/v1/admin/products/77", body: `{"name":"Tea pot","price_cents":1999,"stock":12}`})
			var answers [2]api.Product
			for i, want := range []int{http.StatusCreated, http.StatusOK} {
				rec := f.do(put)
				if rec.Code != want {
					t.Fatalf("put %d: %d %s, want %d", i+1, rec.Code, rec.Body, want)
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &answers[i]); err != nil {
					t.Fatal(err)
				}
				answers[i].ServerTime = time.Time{}
			}
			if answers[0] != answers[1] || answers[0].Name != "Tea pot" || answers[0].PriceCents != 1999 || answers[0].Stock != 12 || answers[0].InitialStock != 12 {
				t.Fatalf("two puts answered %+v and %+v", answers[0], answers[1])
			}
			var rows int64
			if err := f.db.Raw(context.Background(), "SELECT COUNT(*) FROM products WHERE id = 77").Scan(&rows); err != nil || rows != 1 {
				t.Fatalf("%d rows of product 77 (%v), want 1", rows, err)
			}
			if rec := f.do(call{method: "POST", path: "/api/v1/products/77/buy", body: `{"user_id":"ann"}`}); rec.Code != http.StatusCreated {
				t.Fatalf("a buy of the new product: %d %s", rec.Code, rec.Body)
			}
			coupon := admin(call{method: "PUT", path: "/api/v1/admin/coupons/78", body: `{"name":"5 off","total":3}`})
			for i, want := range []int{http.StatusCreated, http.StatusOK} {
				if rec := f.do(coupon); rec.Code != want || !strings.Contains(rec.Body.String(), `"total":3`) {
					t.Fatalf("coupon put %d: %d %s", i+1, rec.Code, rec.Body)
				}
			}
		})
	}
}

func TestArchivedItemAnswers404AndKeepsItsOrders(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := catalogueFixture(t, b.Open(t))
			redis := map[string]string{"X-Seckill-Stage": "redis-atomic"}
			var orders []string
			for _, c := range []call{
				{method: "POST", path: "/api/v1/products/2/buy", body: `{"user_id":"kept-1"}`},
				admin(call{method: "POST", path: "/api/v1/products/2/buy", body: `{"user_id":"kept-2"}`, header: redis}), // loads the Redis copy
			} {
				rec := f.do(c)
				var o api.Order
				if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &o) != nil {
					t.Fatalf("buy before the archive: %d %s", rec.Code, rec.Body)
				}
				orders = append(orders, o.OrderNo)
			}
			for i := range 2 { // the second archive answers as the first
				rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/products/2/archive"}))
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"archived":true`) {
					t.Fatalf("archive %d: %d %s", i+1, rec.Code, rec.Body)
				}
			}
			for _, c := range []call{
				{method: "GET", path: "/api/v1/products/2"},
				{method: "POST", path: "/api/v1/products/2/buy", body: `{"user_id":"late-1"}`},
				admin(call{method: "POST", path: "/api/v1/products/2/buy", body: `{"user_id":"late-2"}`, header: redis}),
				{method: "GET", path: "/api/v1/products/2/audit"},
				admin(call{method: "POST", path: "/api/v1/admin/products/999/archive"}),
			} {
				if rec := f.do(c); rec.Code != http.StatusNotFound || problemType(t, rec) != "not-found" {
					t.Errorf("%s %s after the archive: %d %s, want 404 not-found", c.method, c.path, rec.Code, rec.Body)
				}
			}
			for _, no := range orders {
				if rec := f.do(call{method: "GET", path: "/api/v1/orders/" + no}); rec.Code != http.StatusOK {
					t.Errorf("order %s of the archived product: %d %s, want it kept", no, rec.Code, rec.Body)
				}
			}
			if rec := f.do(admin(call{method: "PUT", path: "/api/v1/admin/products/2", body: `{"name":"again","price_cents":1,"stock":1}`})); rec.Code != http.StatusConflict || problemType(t, rec) != "archived" {
				t.Errorf("a put of the archived id: %d %s, want 409 archived", rec.Code, rec.Body)
			}
			var list api.Products
			rec := f.do(call{method: "GET", path: "/api/v1/products"})
			if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Products) != 1 || list.Products[0].ID != 1 {
				t.Errorf("the list after the archive: %s (%v), want product 1 alone", rec.Body, err)
			}
		})
	}
}

func TestSessionPutsEveryItemOnSaleInItsWindow(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := catalogueFixture(t, b.Open(t))
			if rec := f.do(call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"early"}`}); rec.Code != http.StatusCreated {
				t.Fatalf("buy: %d %s", rec.Code, rec.Body)
			}
			opens := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			body := `{"opens_at":"` + opens.Format(time.RFC3339) + `","items":[{"id":1,"stock":7},{"id":2,"stock":9}]}`
			rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/sessions", body: body}))
			var s api.Session
			if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &s) != nil || len(s.Items) != 2 || s.Kind != "product" || s.OpensAt == nil || !s.OpensAt.Equal(opens) {
				t.Fatalf("session: %d %s", rec.Code, rec.Body)
			}
			for id, stock := range map[int64]int{1: 7, 2: 9} {
				p, _ := f.product(id)
				if p.Stock != stock || p.InitialStock != stock || p.OpensAt == nil || !p.OpensAt.Equal(opens) {
					t.Errorf("product %d after the session: %+v", id, p)
				}
			}
			if rec := f.do(call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"early"}`}); rec.Code != http.StatusConflict || problemType(t, rec) != "sale-not-open" {
				t.Errorf("a buy before the session opens: %d %s, want 409 sale-not-open (and the earlier order gone)", rec.Code, rec.Body)
			}
			rec = f.do(call{method: "GET", path: "/api/v1/products?state=scheduled"})
			var list api.Products
			if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Products) != 2 {
				t.Errorf("scheduled products: %s", rec.Body)
			}
			rec = f.do(call{method: "GET", path: "/api/v1/products?state=open"})
			if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Products) != 0 {
				t.Errorf("open products: %s", rec.Body)
			}
		})
	}
}

func TestListRefusesABadQuery(t *testing.T) {
	f := catalogueFixture(t, testenv.SQLite(t))
	for _, q := range []struct{ query, field string }{
		{"limit=0", "limit"}, {"limit=201", "limit"}, {"limit=ten", "limit"},
		{"cursor=xyz", "cursor"}, {"cursor=" + "YWZ0ZXI6LTE", "cursor"}, // after:-1
		{"state=sold_out", "state"}, {"state=", "state"},
		// A pair that is not URL-encoded is refused, not dropped: dropped,
		// the filter or the cursor was silently left out (the first page,
		// every state, 50 items).
		{"state=%zz", "state"}, {"limit=%zz", "limit"}, {"cursor=YWZ0ZXI6Mg%", "cursor"},
		{"state=closed;limit=1", "state"}, {"st%zate=closed", "st%zate"},
	} {
		for _, list := range []string{"/api/v1/products?", "/api/v1/coupons?"} {
			rec := f.do(call{method: "GET", path: list + q.query})
			if rec.Code != http.StatusBadRequest || problemType(t, rec) != "invalid-request" || !strings.Contains(detail(t, rec.Body.Bytes()), q.field) {
				t.Errorf("%s%s: %d %s, want 400 invalid-request naming %s", list, q.query, rec.Code, rec.Body, q.field)
			}
		}
	}
}

// TestListWalkMeetsEveryItemOnceWhileItemsAreCreated walks the products
// seven a page and, between two fetches, creates one product behind the
// cursor and one ahead of the walk: every product there at the start is
// listed exactly once, no product twice, and the walk ends.
func TestListWalkMeetsEveryItemOnceWhileItemsAreCreated(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := catalogueFixture(t, b.Open(t))
			start := []int64{1, 2}
			for id := int64(10); id <= 300; id += 10 {
				if rec := f.do(admin(call{method: "PUT", path: fmt.Sprintf("/api/v1/admin/products/%d", id), body: `{"name":"old","price_cents":1,"stock":1}`})); rec.Code != http.StatusCreated {
					t.Fatalf("put %d: %d %s", id, rec.Code, rec.Body)
				}
				start = append(start, id)
			}
			seen := map[int64]int{}
			cursor, ahead := "", int64(5000)
			for fetch := 0; ; fetch++ {
				path := "/api/v1/products?limit=7"
				if cursor != "" {
					path += "&cursor=" + cursor
				}
				rec := f.do(call{method: "GET", path: path})
				var page api.Products
				if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &page) != nil || len(page.Products) > 7 {
					t.Fatalf("page %d: %d %s", fetch, rec.Code, rec.Body)
				}
				var last int64
				for _, p := range page.Products {
					seen[p.ID]++
					last = p.ID
				}
				if page.NextCursor == "" {
					break
				}
				if fetch > 50 {
					t.Fatal("the walk does not end")
				}
				cursor = page.NextCursor
				if fetch < 4 {
					for _, id := range []int64{last - 1, ahead} {
						if rec := f.do(admin(call{method: "PUT", path: fmt.Sprintf("/api/v1/admin/products/%d", id), body: `{"name":"new","price_cents":1,"stock":1}`})); rec.Code != http.StatusCreated {
							t.Fatalf("put %d mid-walk: %d %s", id, rec.Code, rec.Body)
						}
					}
					ahead++
				}
			}
			for _, id := range start {
				if seen[id] != 1 {
					t.Errorf("product %d listed %d times, want once", id, seen[id])
				}
			}
			for id, n := range seen {
				if n > 1 {
					t.Errorf("product %d listed %d times", id, n)
				}
			}
			for id := int64(5000); id < ahead; id++ {
				if seen[id] != 1 {
					t.Errorf("product %d, created ahead of the walk, listed %d times, want once", id, seen[id])
				}
			}
		})
	}
}

// TestFullestListPageFitsIn256KB fills one page to its most: 200 items
// (the largest limit), each named with 128 characters of four bytes each
// in UTF-8 (the longest a name's characters get), in a sale window. Each
// list answer, products and coupons, stays within 256 KB (issue 60).
func TestFullestListPageFitsIn256KB(t *testing.T) {
	const maxPage, maxBytes = 200, 256 << 10
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := catalogueFixture(t, b.Open(t))
			name := strings.Repeat("\U0001F6D2", 128) // 🛒
			for id := 1; id <= maxPage; id++ {
				for _, c := range []call{
					{method: "PUT", path: fmt.Sprintf("/api/v1/admin/products/%d", id), body: fmt.Sprintf(`{"name":%q,"price_cents":999999999,"stock":999999999}`, name)},
					{method: "PUT", path: fmt.Sprintf("/api/v1/admin/coupons/%d", id), body: fmt.Sprintf(`{"name":%q,"total":999999999}`, name)},
				} {
					if rec := f.do(admin(c)); rec.Code/100 != 2 {
						t.Fatalf("%s %s: %d %s", c.method, c.path, rec.Code, rec.Body)
					}
				}
			}
			opens, closes := time.Now().Add(time.Hour).UTC(), time.Now().Add(2*time.Hour).UTC()
			body := sessionBody(maxPage, opens.Format(time.RFC3339Nano), closes.Format(time.RFC3339Nano), nil)
			if rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/sessions", body: body})); rec.Code != http.StatusOK {
				t.Fatalf("session: %d %s", rec.Code, rec.Body)
			}
			for _, kind := range []string{"products", "coupons"} {
				rec := f.do(call{method: "GET", path: fmt.Sprintf("/api/v1/%s?limit=%d", kind, maxPage)})
				var page map[string]json.RawMessage
				if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &page) != nil {
					t.Fatalf("%s: %d %s", kind, rec.Code, rec.Body)
				}
				var items []json.RawMessage
				if err := json.Unmarshal(page[kind], &items); err != nil || len(items) != maxPage {
					t.Fatalf("%s: %d items (%v), want a full page of %d", kind, len(items), err, maxPage)
				}
				if n := rec.Body.Len(); n > maxBytes {
					t.Errorf("a full page of %s is %d bytes, over %d", kind, n, maxBytes)
				} else {
					t.Logf("a full page of %s: %d bytes (%.0f%% of 256 KB)", kind, n, 100*float64(n)/maxBytes)
				}
			}
		})
	}
}

// TestLargestSessionFitsItsBodyCap: a session of 1,000 items with the
// longest ids and stocks, indented as a tool might send it, is over the
// 64 KiB cap of the other routes; it is read (and here refused for its
// first item, which does not exist), not answered 413. A body over the
// session's own cap is.
func TestLargestSessionFitsItsBodyCap(t *testing.T) {
	f := catalogueFixture(t, testenv.SQLite(t))
	type item struct {
		ID    int64 `json:"id"`
		Stock int   `json:"stock"`
	}
	items := make([]item, 1000)
	for i := range items {
		items[i] = item{ID: math.MaxInt64 - int64(i), Stock: 1_000_000_000}
	}
	body, err := json.MarshalIndent(map[string]any{"kind": "product", "items": items}, "", "    ")
	if err != nil {
		t.Fatal(err)
	}
	if len(body) <= httpapi.MaxBody || len(body) > httpapi.MaxSessionBody {
		t.Fatalf("the session's body is %d bytes: not between the caps %d and %d", len(body), httpapi.MaxBody, httpapi.MaxSessionBody)
	}
	rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/sessions", body: string(body)}))
	if rec.Code != http.StatusBadRequest || problemType(t, rec) != "invalid-request" || !strings.Contains(detail(t, rec.Body.Bytes()), "items[0].id") {
		t.Fatalf("a 1,000-item session of %d bytes: %d %s; want it read, and refused 400 for items[0].id", len(body), rec.Code, rec.Body)
	}
	over := string(body) + strings.Repeat(" ", httpapi.MaxSessionBody)
	if rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/sessions", body: over})); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a session of %d bytes: %d %s; want 413", len(over), rec.Code, rec.Body)
	}
}
