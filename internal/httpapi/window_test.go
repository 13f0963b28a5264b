package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestSaleWindowAnswers drives the sale window through the API, under a
// SQL stage and a Redis stage: the admin reset sets it and the item's GET
// shows it with the server's time; a buy before it is 409 sale-not-open
// with Retry-After until the opening, and lets its Idempotency-Key go, so
// the same key buys once the sale is open; a buy after it is 409
// sale-closed; a window that closes before it opens is refused.
func TestSaleWindowAnswers(t *testing.T) {
	db := testenv.SQLite(t)
	rdb := testenv.Redis(t)
	ns := testenv.Name("win-")
	const token = "window-token"
	for _, stage := range []string{inventory.StageDBAtomic, inventory.StageRedisAtomic} {
		t.Run(stage, func(t *testing.T) {
			st := db.Products()
			stages := map[string]inventory.Stage{
				inventory.StageDBAtomic:    inventory.NewDBAtomic(st),
				inventory.StageRedisAtomic: redisstage.NewRedisAtomic(rdb, st, ns+stage, nil),
			}
			svc := inventory.NewService(st, stages, "test-1", "O")
			f := &fixture{t: t, db: db, srv: httpapi.NewServer(httpapi.Deps{
				Instance: "test-1", Products: svc, AdminToken: token, Stage: stage,
				Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: ns + stage + ":idem:"}),
			})}
			admin := map[string]string{"Authorization": "Bearer " + token}
			reset := func(body string) api.Product {
				t.Helper()
				rec := f.do(call{method: "POST", path: "/api/v1/admin/products/1/reset", body: body, header: admin})
				if rec.Code != http.StatusOK {
					t.Fatalf("reset %s: %d %s", body, rec.Code, rec.Body)
				}
				var p api.Product
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
					t.Fatal(err)
				}
				return p
			}
			serverTime := func() time.Time {
				t.Helper()
				rec := f.do(call{method: "GET", path: "/api/v1/products/1"})
				var p api.Product
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusOK {
					t.Fatalf("GET: %d %s (%v)", rec.Code, rec.Body, err)
				}
				if p.ServerTime.IsZero() {
					t.Fatalf("GET shows no server_time: %s", rec.Body)
				}
				return p.ServerTime
			}
			buy := func(user, key string) (int, string, string) {
				t.Helper()
				h := map[string]string{}
				if key != "" {
					h["Idempotency-Key"] = key
				}
				rec := f.do(call{method: "POST", path: "/api/v1/products/1/buy", body: fmt.Sprintf(`{"user_id":%q}`, user), header: h})
				var p api.Problem
				_ = json.Unmarshal(rec.Body.Bytes(), &p)
				return rec.Code, strings.TrimPrefix(p.Type, api.ProblemTypePrefix), rec.Header().Get("Retry-After")
			}

			opens := serverTime().Add(time.Hour).Truncate(time.Millisecond)
			p := reset(fmt.Sprintf(`{"stock":5,"opens_at":%q}`, opens.Format(time.RFC3339Nano)))
			if p.OpensAt == nil || !p.OpensAt.Equal(opens) || p.ClosesAt != nil {
				t.Fatalf("reset with opens_at %v shows opens_at %v, closes_at %v", opens, p.OpensAt, p.ClosesAt)
			}
			code, typ, retry := buy("early", "key-early")
			secs, _ := strconv.Atoi(retry)
			// The seconds until the opening, rounded up: an hour, less
			// what the test took so far.
			if code != http.StatusConflict || typ != "sale-not-open" || secs < 1 || secs > 3600 {
				t.Fatalf("a buy an hour before the opening: %d %s Retry-After %q, want 409 sale-not-open with Retry-After up to 3600", code, typ, retry)
			}

			reset(fmt.Sprintf(`{"stock":5,"opens_at":%q}`, serverTime().Add(-time.Second).Format(time.RFC3339Nano)))
			if code, typ, _ := buy("early", "key-early"); code != http.StatusCreated {
				t.Fatalf("the same Idempotency-Key once the sale is open: %d %s, want 201 (the refusal let the key go)", code, typ)
			}

			reset(fmt.Sprintf(`{"stock":5,"closes_at":%q}`, serverTime().Add(-time.Second).Format(time.RFC3339Nano)))
			for _, key := range []string{"", "key-late"} {
				if code, typ, retry := buy("late", key); code != http.StatusConflict || typ != "sale-closed" || retry != "" {
					t.Fatalf("a buy after the closing (key %q): %d %s Retry-After %q, want 409 sale-closed without Retry-After", key, code, typ, retry)
				}
			}

			now := serverTime()
			rec := f.do(call{method: "POST", path: "/api/v1/admin/products/1/reset", header: admin,
				body: fmt.Sprintf(`{"stock":5,"opens_at":%q,"closes_at":%q}`, now.Format(time.RFC3339), now.Add(-time.Minute).Format(time.RFC3339))})
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "invalid-request") {
				t.Fatalf("a window that closes before it opens: %d %s, want 400 invalid-request", rec.Code, rec.Body)
			}

			p = reset(`{"stock":5}`)
			if p.OpensAt != nil || p.ClosesAt != nil {
				t.Fatalf("a reset without a window leaves opens_at %v, closes_at %v", p.OpensAt, p.ClosesAt)
			}
		})
	}
}
