package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// failingStage answers every buy with err.
type failingStage struct{ err error }

func (s failingStage) Buy(context.Context, inventory.Order) error { return s.err }

// TestRetryAfterSaysHowLongToWait: a buyer turned away by the per-item cap
// is told, in whole seconds rounded up, how long a buyer lately spent
// inside the stage (at least 1, at most 30); the other "not now" answers,
// which cannot know, say 1.
func TestRetryAfterSaysHowLongToWait(t *testing.T) {
	db := testenv.SQLite(t)
	for _, c := range []struct {
		err  error
		want string
	}{
		{&admission.Busy{ItemID: 1, Queue: 64, Wait: 2200 * time.Millisecond}, "3"},
		{&admission.Busy{ItemID: 1, Queue: 64, Wait: 2 * time.Second}, "2"},
		{&admission.Busy{ItemID: 1, Queue: 64, Wait: 40 * time.Millisecond}, "1"},
		{&admission.Busy{ItemID: 1, Queue: 64}, "1"},
		{&admission.Busy{ItemID: 1, Queue: 64, Wait: 10 * time.Minute}, "30"},
		{fmt.Errorf("%w: no connection free", inventory.ErrOverloaded), "1"},
		{inventory.ErrLockTimeout, "1"},
		{inventory.ErrUnavailable, "1"},
	} {
		svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": failingStage{c.err}}, "t", "O")
		h := httpapi.NewServer(httpapi.Deps{Instance: "t", Products: svc, Stage: "db-atomic", RequestTimeout: 4 * time.Second})
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/api/v1/products/1/buy", strings.NewReader(`{"user_id":"u","quantity":1}`))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, r)
		if got := w.Header().Get("Retry-After"); w.Code/100 != 4 && w.Code != 503 || got != c.want {
			t.Errorf("%v: %d with Retry-After %q, want %q", c.err, w.Code, got, c.want)
		}
	}
}
