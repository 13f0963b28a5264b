package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestHeaderRefusalIsNotStoredUnderTheKey: a keyed buy refused for a
// header (X-Seckill-Stage without the admin token, with a wrong one, naming
// a stage that does not exist or that this instance lacks; a Content-Type
// other than JSON's) ran nothing. No header is in the key's fingerprint
// (method, path and body), so an answer stored for it would be replayed to
// the retry that fixed the header: a buyer who sent the token would hear
// "Admin token required" for a day. The retry runs instead, and buys.
func TestHeaderRefusalIsNotStoredUnderTheKey(t *testing.T) {
	const token = "stage-header-token"
	h := keyedLocalServer(t, "idem-stage", token)
	const key, body = "stage-header-key", `{"user_id":"stage-header-user","quantity":1}`
	buy := func(stage, auth, contentType string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/api/v1/products/1/buy", strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Seckill-Stage", stage)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, step := range []struct {
		name, stage, auth, contentType string
		status                         int
		problem                        string
	}{
		{"no token", "local-mutex", "", "application/json", http.StatusUnauthorized, "unauthorized"},
		{"wrong token", "local-mutex", "not-the-stage-token", "application/json", http.StatusForbidden, "forbidden"},
		{"unknown stage", "no-such-stage", token, "application/json", http.StatusBadRequest, "unknown-stage"},
		{"stage this instance lacks", "redis-lock", token, "application/json", http.StatusBadRequest, "stage-unavailable"},
		{"not JSON's media type", "local-mutex", token, "text/plain", http.StatusUnsupportedMediaType, "unsupported-media-type"},
		{"fixed", "local-mutex", token, "application/json", http.StatusCreated, ""},
	} {
		expectRun(t, step.name, buy(step.stage, step.auth, step.contentType), step.status, step.problem)
	}
	// The buy that ran is the key's answer from now on.
	if rec := buy("local-mutex", token, "application/json"); rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry of the buy: %d replayed %q %s, want its 201 replayed", rec.Code, rec.Header().Get("Idempotent-Replayed"), rec.Body)
	}
}

// keyedLocalServer is a server selling under local-mutex on SQLite, with
// Idempotency-Key records on the test's Redis under name, and admin token
// token ("": admin routes off).
func keyedLocalServer(t *testing.T, name, token string) http.Handler {
	t.Helper()
	db := testenv.SQLite(t)
	stages := map[string]inventory.Stage{"local-mutex": inventory.NewLocalMutex(db.Products(), "product", inventory.SectionOptions{})}
	return httpapi.NewServer(httpapi.Deps{
		Instance:       name + "-1",
		Products:       inventory.NewService(db.Products(), stages, name+"-1", "O"),
		Stage:          "local-mutex",
		AdminToken:     token,
		Idempotency:    idempotency.New(testenv.Redis(t), idempotency.Options{Prefix: testenv.Name(name) + ":", Retention: time.Hour}),
		RequestTimeout: 25 * time.Second,
	})
}

// expectRun fails the test unless rec is a fresh answer (not a replay) of
// status, and of problem type problem when that is not "".
func expectRun(t *testing.T, name string, rec *httptest.ResponseRecorder, status int, problem string) {
	t.Helper()
	if rec.Code != status || (problem != "" && !strings.Contains(rec.Body.String(), "/problems/"+problem+`"`)) {
		t.Fatalf("%s: %d %s, want %d %s", name, rec.Code, rec.Body, status, problem)
	}
	if rec.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("%s: a replay (%d %s), want the request run", name, rec.Code, rec.Body)
	}
}
