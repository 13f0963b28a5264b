package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// memStore is an in-memory inventory.Store, so that fuzzing runs at
// millions of requests per minute without a database. It keeps the
// database's rules: one order per user, stock never below zero.
type memStore struct {
	mu      sync.Mutex
	initial map[int64]int
	stock   map[int64]int
	fence   map[int64]int64
	orders  map[int64]map[string]int // item -> user -> quantity
	byNo    map[string]inventory.Order
}

func newMemStore() *memStore {
	return &memStore{
		initial: map[int64]int{1: 5, 2: 1},
		stock:   map[int64]int{1: 5, 2: 1},
		fence:   map[int64]int64{},
		orders:  map[int64]map[string]int{1: {}, 2: {}},
		byNo:    map[string]inventory.Order{},
	}
}

func (m *memStore) FindOrder(ctx context.Context, no string) (inventory.Order, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.byNo[no]
	if !ok {
		return o, inventory.ErrOrderNotFound
	}
	return o, nil
}

func (m *memStore) List(ctx context.Context) ([]inventory.Item, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []inventory.Item
	for _, id := range []int64{1, 2} {
		out = append(out, inventory.Item{ID: id, Name: fmt.Sprint("item ", id), InitialStock: m.initial[id], Stock: m.stock[id]})
	}
	return out, nil
}

func (m *memStore) Get(ctx context.Context, id int64) (inventory.Item, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.stock[id]; !ok {
		return inventory.Item{}, inventory.ErrNotFound
	}
	return inventory.Item{ID: id, InitialStock: m.initial[id], Stock: m.stock[id]}, nil
}

func (m *memStore) Audit(ctx context.Context, id int64) (inventory.Audit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.stock[id]; !ok {
		return inventory.Audit{}, inventory.ErrNotFound
	}
	a := inventory.Audit{ItemID: id, InitialStock: m.initial[id], Stock: m.stock[id]}
	for _, q := range m.orders[id] {
		a.Sold += q
		a.Orders++
	}
	return a, nil
}

func (m *memStore) Reset(ctx context.Context, id int64, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.stock[id]; !ok {
		return inventory.ErrNotFound
	}
	m.initial[id], m.stock[id], m.orders[id] = n, n, map[string]int{}
	for no, o := range m.byNo {
		if o.ItemID == id {
			delete(m.byNo, no)
		}
	}
	return nil
}

func (m *memStore) ReadStock(ctx context.Context, id int64) (int, error) {
	it, err := m.Get(ctx, id)
	return it.Stock, err
}

func (m *memStore) Fence(ctx context.Context, id int64, token int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fence[id] >= token {
		return inventory.ErrLockLost
	}
	m.fence[id] = token
	return nil
}

func (m *memStore) insert(o inventory.Order) error {
	if _, ok := m.stock[o.ItemID]; !ok {
		return inventory.ErrNotFound
	}
	if _, dup := m.orders[o.ItemID][o.UserID]; dup {
		return inventory.ErrAlreadyPurchased
	}
	m.orders[o.ItemID][o.UserID] = o.Quantity
	o.Status = inventory.StatusConfirmed
	m.byNo[o.No] = o
	return nil
}

func (m *memStore) WriteComputed(ctx context.Context, o inventory.Order, newStock int, token int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if newStock < 0 {
		return inventory.ErrSoldOut
	}
	if err := m.insert(o); err != nil {
		return err
	}
	m.stock[o.ItemID] = newStock
	return nil
}

func (m *memStore) Deduct(ctx context.Context, o inventory.Order) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.stock[o.ItemID]; ok && s < o.Quantity {
		return inventory.ErrSoldOut
	}
	if err := m.insert(o); err != nil {
		return err
	}
	m.stock[o.ItemID] -= o.Quantity
	return nil
}

const fuzzToken = "fuzz-admin-token"

func fuzzServer() (http.Handler, *memStore, *memStore) {
	products, coupons := newMemStore(), newMemStore()
	stages := func(st inventory.Store, kind string) map[string]inventory.Stage {
		return map[string]inventory.Stage{
			"local-mutex": inventory.NewLocalMutex(st, kind, inventory.SectionOptions{}),
			"db-atomic":   inventory.NewDBAtomic(st),
		}
	}
	h := httpapi.NewServer(httpapi.Deps{
		Instance:   "fuzz",
		Products:   inventory.NewService(products, stages(products, "product"), "fuzz", "O"),
		Coupons:    inventory.NewService(coupons, stages(coupons, "coupon"), "fuzz", "C"),
		AdminToken: fuzzToken,
		Stage:      "db-atomic",
	})
	return h, products, coupons
}

// fuzzRequest sends one fuzzed buy or grab and checks the HTTP contract:
// never a 500; a 201 carries its order number as JSON; anything else is
// problem+json whose status matches the answer's; the stock is never
// oversold and always conserved.
func fuzzRequest(t *testing.T, kind, noField, id, contentType, key, stage, auth string, body []byte) {
	h, products, coupons := fuzzServer()
	req, err := http.NewRequest(http.MethodPost, "/api/v1/"+kind+"/"+id+"/"+map[string]string{"products": "buy", "coupons": "grab"}[kind], strings.NewReader(string(body)))
	if err != nil {
		t.Skip("not a URL a client could send")
	}
	for k, v := range map[string]string{"Content-Type": contentType, "Idempotency-Key": key, "X-Seckill-Stage": stage, "Authorization": auth} {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)

	if rec.Code >= 500 {
		t.Fatalf("status %d for id %q body %q: %s", rec.Code, id, body, rec.Body)
	}
	mt, _, _ := mime.ParseMediaType(rec.Header().Get("Content-Type"))
	switch {
	case rec.Code == http.StatusCreated:
		var o map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil || o[noField] == "" || o[noField] == nil {
			t.Fatalf("201 without %s: %s", noField, rec.Body)
		}
	case rec.Code == http.StatusNotFound && rec.Header().Get("Content-Type") == "" && rec.Body.Len() == 0:
		// gin's redirect-free 404 for a path it cannot route at all
	default:
		var p api.Problem
		if mt != "application/problem+json" {
			t.Fatalf("status %d with Content-Type %q: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != rec.Code || !strings.HasPrefix(p.Type, api.ProblemTypePrefix) {
			t.Fatalf("malformed problem for status %d: %s", rec.Code, rec.Body)
		}
	}
	for _, st := range []*memStore{products, coupons} {
		for _, id := range []int64{1, 2} {
			a, _ := st.Audit(context.Background(), id)
			if a.Oversold() > 0 || !a.Conserved() || a.Stock < 0 {
				t.Fatalf("item %d: %+v after %s %q", id, a, kind, body)
			}
		}
	}
}

func addSeeds(f *testing.F, user string) {
	f.Add("1", "application/json", "", "", "", []byte(`{"user_id":"`+user+`","quantity":1}`))
	f.Add("1", "application/json", "k-1", "", "", []byte(`{"user_id":"`+user+`","quantity":10}`))
	f.Add("2", "application/json; charset=utf-8", `"quoted"`, "", "", []byte(`{"user_id":"`+user+`"}`))
	f.Add("1", "application/json", "", "local-mutex", "Bearer "+fuzzToken, []byte(`{"user_id":"`+user+`","quantity":2}`))
	f.Add("1", "application/json", "", "unlocked", "Bearer wrong", []byte(`{"user_id":"x"}`))
	f.Add("0", "application/json", "", "", "", []byte(`{"user_id":"x"}`))
	f.Add("99999999999999999999", "application/json", "", "", "", []byte(`{}`))
	f.Add("1", "text/plain", "", "", "", []byte(`{"user_id":"x"}`))
	f.Add("1", "application/json", "has space", "", "", []byte(`{"user_id":"x"}`))
	f.Add("1", "application/json", "", "", "", []byte(`{"user_id":"x","quantity":-1}`))
	f.Add("1", "application/json", "", "", "", []byte(`{"user_id":"x","quantity":1e400}`))
	f.Add("1", "application/json", "", "", "", []byte(`{"user_id":"\u0000"}`))
	f.Add("1", "application/json", "", "", "", []byte(`{"user_id":"x"} {"user_id":"y"}`))
	f.Add("1", "application/json", "", "", "", []byte(`[1,2,3]`))
	f.Add("1", "application/json", "", "", "", []byte(`{"user_id":"x","extra":true}`))
	f.Add("-1", "application/json", "", "", "", []byte("\xff\xfe"))
}

// FuzzBuy fuzzes POST /api/v1/products/{id}/buy: path id, content type,
// Idempotency-Key, stage header, Authorization and body.
func FuzzBuy(f *testing.F) {
	addSeeds(f, "buyer")
	f.Fuzz(func(t *testing.T, id, contentType, key, stage, auth string, body []byte) {
		fuzzRequest(t, "products", "order_no", id, contentType, key, stage, auth, body)
	})
}

// FuzzGrab fuzzes POST /api/v1/coupons/{id}/grab the same way.
func FuzzGrab(f *testing.F) {
	addSeeds(f, "grabber")
	f.Fuzz(func(t *testing.T, id, contentType, key, stage, auth string, body []byte) {
		fuzzRequest(t, "coupons", "order_no", id, contentType, key, stage, auth, body)
	})
}
