package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/room"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestOpenAPISecurityMatchesTheRoutes sends every operation of the
// document, without a token, to a server that has one: an operation the
// document says needs the admin token must answer 401 unauthorized, and
// one it says anyone may call must not. A buy or grab that names its
// stage needs the token too. So an admin route listed as public, or the
// other way round, fails here, while TestOpenAPIPassesTheLinter
// (internal/api) fails an operation that states no security at all.
func TestOpenAPISecurityMatchesTheRoutes(t *testing.T) {
	db := testenv.SQLite(t)
	reports := t.TempDir()
	if err := os.MkdirAll(filepath.Join(reports, "run-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(reports, "run-1", "results.json"), []byte(`{"rows":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	stages := func(st inventory.Store) map[string]inventory.Stage {
		return map[string]inventory.Stage{"db-atomic": inventory.NewDBAtomic(st)}
	}
	rooms := room.New(room.Options{RDB: testenv.Redis(t), Namespace: testenv.Name("security")})
	t.Cleanup(rooms.Close)
	srv := NewServer(Deps{
		Rooms:      rooms,
		Instance:   "security-1",
		Products:   inventory.NewService(db.Products(), stages(db.Products()), "security-1", "O"),
		Coupons:    inventory.NewService(db.Coupons(), stages(db.Coupons()), "security-1", "C"),
		AdminToken: "security-token",
		Stage:      "db-atomic",
		Dashboard:  Dashboard{Fleet: idleFleet{}, LabReports: reports},
	})
	fill := strings.NewReplacer("{id}", "1", "{order_no}", "O-none", "{slug}", "sold-out", "{run}", "run-1", "{file}", "results.json", "{name}", "cmdline")
	send := func(op opSpec, header http.Header) int {
		req := httptest.NewRequest(op.method, fill.Replace(op.path), strings.NewReader(op.bodyExample))
		if op.bodyExample != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range header {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		var p api.Problem
		if rec.Header().Get("Content-Type") == "application/problem+json" && json.Unmarshal(rec.Body.Bytes(), &p) == nil &&
			p.Type == api.ProblemTypePrefix+"route-not-found" {
			t.Errorf("%s %s: the server has no such route here, so its security is not checked (%d %s)", op.method, op.path, rec.Code, rec.Body)
		}
		return rec.Code
	}
	for _, op := range openAPIOps() {
		if op.path == "/metrics" {
			continue // registered only with a Metrics observer; public, and no token is asked
		}
		code := send(op, nil)
		switch {
		case op.admin && code != http.StatusUnauthorized:
			t.Errorf("%s %s is documented as needing the admin token, but without one it answered %d", op.method, op.path, code)
		case !op.admin && code == http.StatusUnauthorized:
			t.Errorf("%s %s is documented as open to anyone, but without a token it answered 401", op.method, op.path)
		}
		if op.stageHeader {
			if code := send(op, http.Header{api.StageHeader: {"db-atomic"}}); code != http.StatusUnauthorized {
				t.Errorf("%s %s naming its stage without a token answered %d; the document says naming one needs the admin token", op.method, op.path, code)
			}
		}
	}
}

// idleFleet is a fleet of this instance alone that fires nothing: enough
// for the dashboard's routes to be registered.
type idleFleet struct{}

func (idleFleet) Burst(context.Context, api.BurstRequest) (api.BurstResult, error) {
	return api.BurstResult{}, nil
}
func (idleFleet) SetStage(context.Context, string) ([]api.PeerStage, bool) { return nil, true }
func (idleFleet) Status(context.Context) []api.PeerStatus                  { return nil }
func (idleFleet) Max() int                                                 { return 1 }
