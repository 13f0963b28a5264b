package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestAdminTokenSchemeIsCaseInsensitive: an authentication scheme's name
// is case-insensitive (RFC 9110 section 11.1), so "bearer <token>" is the
// token: it was answered 401 "Admin token required".
func TestAdminTokenSchemeIsCaseInsensitive(t *testing.T) {
	db := testenv.SQLite(t)
	const admin = "scheme-admin-token"
	stages := map[string]inventory.Stage{"local-mutex": inventory.NewLocalMutex(db.Products(), "product", inventory.SectionOptions{})}
	h := httpapi.NewServer(httpapi.Deps{
		Instance:   "scheme-1",
		Products:   inventory.NewService(db.Products(), stages, "scheme-1", "O"),
		Stage:      "local-mutex",
		AdminToken: admin,
	})
	for _, c := range []struct {
		auth   string
		status int
	}{
		{"Bearer " + admin, http.StatusOK},
		{"bearer " + admin, http.StatusOK},
		{"BEARER " + admin, http.StatusOK},
		{"Bearer wrong-token", http.StatusForbidden},
		{"Basic " + admin, http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
	} {
		req := httptest.NewRequest("PUT", "/api/v1/admin/stage", strings.NewReader(`{"stage":"local-mutex"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", c.auth)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("Authorization %q: %d %s, want %d", c.auth, rec.Code, rec.Body, c.status)
		}
	}
}
