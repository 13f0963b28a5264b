package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/burst"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// This file serves the dashboard's server side: the burst that fires many
// buys at once, the stage switch for the whole fleet, the fleet's health,
// and the lab's latest report, read-only.

// Dashboard is what the dashboard's server side needs. A nil Fleet turns
// the burst and fleet routes off; an empty LabReports, the lab routes.
type Dashboard struct {
	Fleet      Fleet
	LabReports string // folder of the lab's reports (SECKILL_LAB_REPORTS)
	// Verdicts records each burst's verdict, and the audit lists the last
	// ones; nil records nothing.
	Verdicts Verdicts
	// Marks keep one burst per item in flight across the fleet
	// (burstmark.go); nil lets bursts and resets of an item overlap.
	Marks BurstMarks
}

// Verdicts is the record of burst verdicts. *store.Bursts implements it.
type Verdicts interface {
	Record(ctx context.Context, v api.BurstVerdict) error
	// Recent returns the item's last n verdicts, newest first.
	Recent(ctx context.Context, kind string, itemID int64, n int) ([]api.BurstVerdict, error)
}

// recentVerdicts is how many verdicts an audit lists.
const recentVerdicts = 20

// addDashboardRoutes registers the routes of this file.
func addDashboardRoutes(api, admin *gin.RouterGroup, s *server, d Deps) {
	if f := d.Dashboard.Fleet; f != nil {
		api.GET("/fleet", s.handleFleet(f))
		admin.POST("/burst", s.handleBurst(f, d.Products, d.Dashboard.Verdicts, d.Dashboard.Marks))
		admin.PUT("/fleet/stage", s.handleFleetStage(f, d.Products))
	}
	if dir := d.Dashboard.LabReports; dir != "" {
		api.GET("/lab/latest", s.handleLabLatest(dir))
		api.GET("/lab/runs/:run/*file", s.handleLabFile(dir))
	}
}

// Fleet is the set of instances the dashboard drives. *burst.Fleet
// implements it.
type Fleet interface {
	// Burst fires r.N concurrent requests across the fleet; its error wraps
	// burst.ErrInvalid when the request is out of bounds.
	Burst(ctx context.Context, r api.BurstRequest) (api.BurstResult, error)
	// SetStage sets the default stage on every instance; ok is false if
	// any refused or did not answer.
	SetStage(ctx context.Context, stage string) (peers []api.PeerStage, ok bool)
	// Status reports every instance's health and stage.
	Status(ctx context.Context) []api.PeerStatus
	// Max is the largest burst accepted.
	Max() int
}

var _ Fleet = (*burst.Fleet)(nil)

// handleBurst fires a burst: admin only, since it writes orders and the
// server does the work. A burst of an item whose burst is in flight
// anywhere in the fleet is refused (409 burst-in-progress).
func (s *server) handleBurst(f Fleet, products *inventory.Service, verdicts Verdicts, marks BurstMarks) gin.HandlerFunc {
	return func(c *gin.Context) {
		var in burstBody
		if err := decodeJSON(c, &in); err != nil {
			s.writeError(c, err)
			return
		}
		b := in.BurstRequest
		var err error
		if b.Stage, err = aliased("stage", b.Stage, "mode", in.Mode); err != nil {
			s.writeError(c, err)
			return
		}
		if b.Stage != "" {
			if err := checkStage(b.Stage, products); err != nil {
				s.writeError(c, err)
				return
			}
		}
		kind := b.Kind
		switch kind {
		case "":
			kind = "product"
		case "product", "coupon":
		default:
			s.writeError(c, fieldError("kind must be product or coupon, got %q", b.Kind))
			return
		}
		end, err := markBurst(c.Request.Context(), marks, s.log, kind, b.ItemID)
		if err != nil {
			s.writeError(c, err)
			return
		}
		defer end()
		res, err := f.Burst(c.Request.Context(), b)
		if errors.Is(err, burst.ErrInvalid) {
			s.writeError(c, fieldError("%s", strings.TrimPrefix(err.Error(), burst.ErrInvalid.Error()+": ")))
			return
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.log.Info("burst", "kind", b.Kind, "item", b.ItemID, "n", b.N, "created", res.Counts.Created, "oversold", res.Audit != nil && res.Audit.Oversold > 0)
		if verdicts != nil && res.Audit != nil {
			// The burst's answer does not depend on the record: a failed
			// write is logged, and the verdict is in the answer anyway.
			// Also when the caller has left mid-burst: what it did stays
			// on the record.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 5*time.Second)
			err := verdicts.Record(ctx, verdictOf(res))
			cancel()
			if err != nil {
				s.log.Warn("recording the burst's verdict", "err", err)
			}
		}
		s.writeJSON(c, http.StatusOK, res)
	}
}

// verdictOf is what a finished burst did, for the record.
func verdictOf(res api.BurstResult) api.BurstVerdict {
	stage := res.Request.Stage
	if stage == "" {
		stage = "mixed"
		if len(res.Stages) == 1 {
			for only := range res.Stages {
				stage = only
			}
		}
	}
	kind := res.Request.Kind
	if kind == "" {
		kind = "product"
	}
	a := res.Audit
	return api.BurstVerdict{At: time.Now().UTC(), Kind: kind, ItemID: res.Request.ItemID, Stage: stage, Buyers: res.Request.N,
		InitialStock: a.InitialStock, Sold: a.Sold + a.Pending, Oversold: a.Oversold, ElapsedMS: res.ElapsedMS, P99MS: res.Latency.P99, BuyerP99MS: res.BuyerLatency.P99}
}

// burstBody is a burst request as read: "mode" is the former name of
// "stage", still accepted.
type burstBody struct {
	api.BurstRequest
	Mode string `json:"mode"`
}

// handleFleetStage switches every instance's stage. A partial switch
// answers 502 with each instance's answer, so the caller sees which one
// refused.
func (s *server) handleFleetStage(f Fleet, products *inventory.Service) gin.HandlerFunc {
	return func(c *gin.Context) {
		stage, ok := s.readStage(c, products)
		if !ok {
			return
		}
		peers, ok := f.SetStage(c.Request.Context(), stage)
		status := http.StatusOK
		if !ok {
			status = http.StatusBadGateway
		}
		s.log.Info("fleet stage changed", "stage", stage, "ok", ok)
		s.writeJSON(c, status, api.FleetStageChange{Stage: stage, OK: ok, Peers: peers})
	}
}

// handleFleet lists the instances with their health and stage. It is
// public: the same facts are on every instance's /api/v1/info.
func (s *server) handleFleet(f Fleet) gin.HandlerFunc {
	return func(c *gin.Context) {
		s.writeJSON(c, http.StatusOK, api.Fleet{
			ServedBy: s.instance,
			Peers:    f.Status(c.Request.Context()),
			BurstMax: f.Max(),
			Admin:    s.adminOn,
		})
	}
}

// labFiles are the kinds of file a lab report holds; nothing else is served.
var labFiles = map[string]string{
	".json": "application/json; charset=utf-8",
	".md":   "text/markdown; charset=utf-8",
	".txt":  "text/plain; charset=utf-8",
	".hlog": "text/plain; charset=utf-8", // an HdrHistogram interval log
	".csv":  "text/csv; charset=utf-8",
	".html": "text/html; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
}

// handleLabLatest answers the newest lab run: its results.json and the
// names of its files, or available=false with how to make one.
func (s *server) handleLabLatest(dir string) gin.HandlerFunc {
	return func(c *gin.Context) {
		none := api.LabLatest{Hint: "No lab report yet. Run `make lab` (reports go to " + dir + ")."}
		root, err := os.OpenRoot(dir)
		if err != nil {
			s.writeJSON(c, http.StatusOK, none)
			return
		}
		defer root.Close()
		run := latestRun(root)
		if run == "" {
			s.writeJSON(c, http.StatusOK, none)
			return
		}
		raw, err := readRootFile(root, run+"/results.json", 8<<20)
		if err != nil || !json.Valid(raw) {
			none.Hint = "The latest lab run (" + run + ") has no readable results.json; run `make lab` again."
			s.writeJSON(c, http.StatusOK, none)
			return
		}
		var files []string
		if entries, err := fs.ReadDir(root.FS(), run); err == nil {
			for _, e := range entries {
				if _, ok := labFiles[strings.ToLower(path.Ext(e.Name()))]; ok && !e.IsDir() {
					files = append(files, e.Name())
				}
			}
		}
		s.writeJSON(c, http.StatusOK, api.LabLatest{Available: true, Run: run, Results: json.RawMessage(raw), Files: files})
	}
}

// handleLabFile serves one file of one lab run. os.Root confines every open
// to dir, symlinks included, so no path can read outside the reports. Plots
// are sandboxed: their scripts run, but not as this origin.
func (s *server) handleLabFile(dir string) gin.HandlerFunc {
	return func(c *gin.Context) {
		run, name := c.Param("run"), strings.TrimPrefix(c.Param("file"), "/")
		ctype, known := labFiles[strings.ToLower(path.Ext(name))]
		if !oneName(run) || !filepath.IsLocal(name) || !known {
			s.writeError(c, errRouteNotFound)
			return
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			s.writeError(c, errRouteNotFound)
			return
		}
		defer root.Close()
		f, err := root.Open(run + "/" + name)
		if err != nil {
			s.writeError(c, errRouteNotFound)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || st.IsDir() {
			s.writeError(c, errRouteNotFound)
			return
		}
		c.Header("Content-Type", ctype)
		c.Header("X-Content-Type-Options", "nosniff")
		c.Header("Content-Security-Policy", "sandbox allow-scripts")
		http.ServeContent(c.Writer, c.Request, name, st.ModTime(), f)
	}
}

// latestRun names the newest run: latest.txt, else the latest symlink, else
// the greatest folder name (runs are named by timestamp) with results.json.
func latestRun(root *os.Root) string {
	if raw, err := readRootFile(root, "latest.txt", 1024); err == nil {
		if name := path.Base(strings.TrimSpace(string(raw))); oneName(name) {
			return name
		}
	}
	if target, err := root.Readlink("latest"); err == nil {
		if name := filepath.Base(target); oneName(name) {
			return name
		}
	}
	if st, err := root.Stat("latest/results.json"); err == nil && !st.IsDir() {
		return "latest"
	}
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return ""
	}
	var runs []string
	for _, e := range entries {
		if st, err := root.Stat(e.Name() + "/results.json"); e.IsDir() && err == nil && !st.IsDir() {
			runs = append(runs, e.Name())
		}
	}
	if len(runs) == 0 {
		return ""
	}
	slices.Sort(runs)
	return runs[len(runs)-1]
}

// oneName reports whether s is a single, plain path element.
func oneName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`) && filepath.IsLocal(s)
}

func readRootFile(root *os.Root, name string, limit int64) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
