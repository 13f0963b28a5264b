package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
)

func labServer(t *testing.T, reports string) http.Handler {
	t.Helper()
	db := testenv.SQLite(t)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": inventory.NewDBAtomic(db.Products())}, "t", "O")
	return httpapi.NewServer(httpapi.Deps{Instance: "t", Products: svc, Stage: "db-atomic",
		Dashboard: httpapi.Dashboard{LabReports: reports}})
}

func get(h http.Handler, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w
}

func TestLabReportIsServedReadOnlyFromItsFolder(t *testing.T) {
	base := t.TempDir()
	reports := filepath.Join(base, "reports")
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(base, "secret.json"), `{"secret":true}`)

	h := labServer(t, reports)
	var none struct {
		Available bool   `json:"available"`
		Hint      string `json:"hint"`
	}
	if err := json.NewDecoder(get(h, "/api/v1/lab/latest").Body).Decode(&none); err != nil || none.Available || !strings.Contains(none.Hint, "make lab") {
		t.Fatalf("without reports: %+v, %v; want available=false and a hint naming make lab", none, err)
	}

	write(filepath.Join(reports, "20260101-000000", "results.json"), `{"rows":[{"stage":"unlocked"}]}`)
	write(filepath.Join(reports, "20260102-000000", "results.json"), `{"rows":[{"stage":"db-atomic"}]}`)
	write(filepath.Join(reports, "20260102-000000", "plot-db-atomic.html"), `<html>plot</html>`)
	var latest struct {
		Available bool            `json:"available"`
		Run       string          `json:"run"`
		Results   json.RawMessage `json:"results"`
		Files     []string        `json:"files"`
	}
	if err := json.NewDecoder(get(h, "/api/v1/lab/latest").Body).Decode(&latest); err != nil {
		t.Fatal(err)
	}
	if !latest.Available || latest.Run != "20260102-000000" || !strings.Contains(string(latest.Results), "db-atomic") || len(latest.Files) != 2 {
		t.Fatalf("latest = %+v", latest)
	}

	write(filepath.Join(reports, "latest.txt"), "20260101-000000\n")
	if err := json.NewDecoder(get(h, "/api/v1/lab/latest").Body).Decode(&latest); err != nil || latest.Run != "20260101-000000" {
		t.Fatalf("with latest.txt: run = %q, %v; want the run it names", latest.Run, err)
	}

	w := get(h, "/api/v1/lab/runs/20260102-000000/plot-db-atomic.html")
	if w.Code != http.StatusOK || !strings.Contains(w.Header().Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("plot: %d, CSP %q; want 200 and a sandbox", w.Code, w.Header().Get("Content-Security-Policy"))
	}
	write(filepath.Join(reports, "20260102-000000", "hdr-buy-db-atomic.hlog"), "#[Histogram log format version 1.3]\n")
	if w := get(h, "/api/v1/lab/runs/20260102-000000/hdr-buy-db-atomic.hlog"); w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		t.Errorf("interval log: %d %q; want 200 and plain text", w.Code, w.Header().Get("Content-Type"))
	}
	for _, path := range []string{
		"/api/v1/lab/runs/../secret.json",
		"/api/v1/lab/runs/..%2Fsecret.json/x.json",
		"/api/v1/lab/runs/20260102-000000/../../secret.json",
		"/api/v1/lab/runs/20260102-000000/..%2F..%2Fsecret.json",
		"/api/v1/lab/runs/20260102-000000/results.go",
	} {
		if w := get(h, path); w.Code == http.StatusOK || strings.Contains(w.Body.String(), `"secret":true`) {
			t.Errorf("GET %s = %d %q; want refused", path, w.Code, w.Body.String())
		}
	}
}
