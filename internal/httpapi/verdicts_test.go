package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// cannedFleet answers every burst with the next canned result.
type cannedFleet struct{ results []api.BurstResult }

func (f *cannedFleet) Burst(_ context.Context, r api.BurstRequest) (api.BurstResult, error) {
	res := f.results[0]
	f.results = f.results[1:]
	res.Request = r
	return res, nil
}
func (f *cannedFleet) SetStage(context.Context, string) ([]api.PeerStage, bool) { return nil, true }
func (f *cannedFleet) Status(context.Context) []api.PeerStatus                  { return nil }
func (f *cannedFleet) Max() int                                                 { return 2000 }

// failingVerdicts cannot record.
type failingVerdicts struct{}

func (failingVerdicts) Record(context.Context, api.BurstVerdict) error {
	return errors.New("disk full")
}
func (failingVerdicts) Recent(context.Context, string, int64, int) ([]api.BurstVerdict, error) {
	return nil, errors.New("disk full")
}

// TestBurstVerdictsAreRecordedAndAudited: each burst's verdict is written
// when it ends (its stage from the request, else from the answers), and
// the item's audit lists them newest first. A record that cannot be
// written costs neither the burst's answer nor the audit.
func TestBurstVerdictsAreRecordedAndAudited(t *testing.T) {
	const admin = "verdict-admin-token"
	db := testenv.SQLite(t)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": inventory.NewDBAtomic(db.Products())}, "t", "O")
	audit := func(sold, oversold int) *api.Audit {
		return &api.Audit{InitialStock: 100, Sold: sold, Oversold: oversold}
	}
	fleet := &cannedFleet{results: []api.BurstResult{
		{Audit: audit(187, 87), Stages: map[string]int{"unlocked": 300}, ElapsedMS: 700, Latency: api.BurstLatency{P99: 600}, BuyerLatency: api.BurstLatency{P99: 650}},
		{Audit: &api.Audit{InitialStock: 100, Sold: 40, Pending: 60, PendingOrders: 60}, Stages: map[string]int{"redis-stream": 300}},
		{Audit: audit(100, 0), Stages: map[string]int{"db-atomic": 150, "redis-lock": 150}},
		{AuditError: "no instance answered", Stages: map[string]int{"db-atomic": 1}},
	}}
	h := httpapi.NewServer(httpapi.Deps{Instance: "t", Products: svc, Stage: "db-atomic", AdminToken: admin,
		Dashboard: httpapi.Dashboard{Fleet: fleet, Verdicts: db.Bursts()}})
	burst := func(h http.Handler, body string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/api/v1/admin/burst", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+admin)
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, body := range []string{
		`{"kind":"product","item_id":1,"n":300,"stage":"db-atomic"}`, // the request's stage wins over the answers'
		`{"kind":"product","item_id":1,"n":300}`,
		`{"kind":"product","item_id":1,"n":300}`,
		`{"kind":"product","item_id":1,"n":1}`, // no audit: nothing to record
	} {
		if code := burst(h, body); code != http.StatusOK {
			t.Fatalf("burst %s: %d", body, code)
		}
	}
	var a api.Audit
	if err := json.NewDecoder(get(h, "/api/v1/products/1/audit").Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	type short struct {
		stage              string
		buyers, sold, over int
	}
	var got []short
	for _, v := range a.Bursts {
		got = append(got, short{v.Stage, v.Buyers, v.Sold, v.Oversold})
	}
	want := []short{{"mixed", 300, 100, 0}, {"redis-stream", 300, 100, 0}, {"db-atomic", 300, 187, 87}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("audit's bursts %+v, want %+v", got, want)
	}
	if v := a.Bursts[2]; v.P99MS != 600 || v.BuyerP99MS != 650 || v.ElapsedMS != 700 || v.At.IsZero() || v.Kind != "product" || v.ItemID != 1 {
		t.Errorf("first verdict %+v", v)
	}

	// A caller who leaves before the answer: the verdict is recorded all
	// the same.
	fleet.results = []api.BurstResult{{Audit: audit(150, 50), Stages: map[string]int{"db-atomic": 10}}}
	gone, leave := context.WithCancel(context.Background())
	leave()
	w := httptest.NewRecorder()
	r := httptest.NewRequestWithContext(gone, http.MethodPost, "/api/v1/admin/burst", strings.NewReader(`{"kind":"product","item_id":1,"n":10}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+admin)
	h.ServeHTTP(w, r)
	if err := json.NewDecoder(get(h, "/api/v1/products/1/audit").Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	if len(a.Bursts) != 4 || a.Bursts[0].Oversold != 50 {
		t.Errorf("after a burst whose caller left: %d verdicts, newest %+v; want it recorded", len(a.Bursts), a.Bursts[0])
	}

	// A record that fails: the burst still answers, the audit too.
	fleet.results = []api.BurstResult{{Audit: audit(100, 0), Stages: map[string]int{"db-atomic": 10}}}
	h = httpapi.NewServer(httpapi.Deps{Instance: "t", Products: svc, Stage: "db-atomic", AdminToken: admin,
		Dashboard: httpapi.Dashboard{Fleet: fleet, Verdicts: failingVerdicts{}}})
	if code := burst(h, `{"kind":"product","item_id":1,"n":10}`); code != http.StatusOK {
		t.Errorf("a burst whose verdict cannot be recorded: %d, want 200", code)
	}
	if w := get(h, "/api/v1/products/1/audit"); w.Code != http.StatusOK {
		t.Errorf("an audit whose verdicts cannot be read: %d, want 200", w.Code)
	}
}
