package burst

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// Status asks every peer, in parallel, for its health, readiness and stage.
// A peer that does not answer is reported unhealthy with the error; Status
// itself does not fail.
func (f *Fleet) Status(ctx context.Context) []api.PeerStatus {
	out := make([]api.PeerStatus, len(f.opts.Peers))
	var wg sync.WaitGroup
	for i, p := range f.opts.Peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = f.status(ctx, p)
		}()
	}
	wg.Wait()
	return out
}

func (f *Fleet) status(ctx context.Context, peer string) api.PeerStatus {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s := api.PeerStatus{URL: peer}
	var info struct {
		Instance string   `json:"instance"`
		Stage    string   `json:"stage"`
		Stages   []string `json:"stages"`
	}
	if err := f.getJSON(ctx, peer+"/api/v1/info", &info); err != nil {
		s.Error = err.Error()
		return s
	}
	s.Instance, s.Stage, s.Stages = info.Instance, info.Stage, info.Stages
	var h struct{}
	s.Healthy = f.getJSON(ctx, peer+"/healthz", &h) == nil
	if err := f.getJSON(ctx, peer+"/readyz", &h); err != nil {
		s.Error = err.Error()
	} else {
		s.Ready = true
	}
	return s
}

// SetStage sets the default stage of every peer, in parallel. It returns each
// peer's answer, and ok=false if any peer refused or did not answer (then
// the fleet may be mixed; calling again converges it).
func (f *Fleet) SetStage(ctx context.Context, stage string) (out []api.PeerStage, ok bool) {
	out = make([]api.PeerStage, len(f.opts.Peers))
	var wg sync.WaitGroup
	for i, p := range f.opts.Peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = f.setStage(ctx, p, stage)
		}()
	}
	wg.Wait()
	ok = true
	for _, m := range out {
		ok = ok && m.Error == ""
	}
	return out, ok
}

func (f *Fleet) setStage(ctx context.Context, peer, stage string) api.PeerStage {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	pm := api.PeerStage{URL: peer}
	body, _ := json.Marshal(api.StageChange{Stage: stage})
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, peer+"/api/v1/admin/stage", bytes.NewReader(body))
	if err != nil {
		pm.Error = err.Error()
		return pm
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+f.opts.AdminToken)
	resp, err := f.client.Do(req)
	if err != nil {
		pm.Error = err.Error()
		return pm
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10)) // a short read still leaves the status to report
	if resp.StatusCode != http.StatusOK {
		var p struct {
			Title  string `json:"title"`
			Detail string `json:"detail"`
		}
		if json.Unmarshal(raw, &p) == nil && p.Title != "" {
			pm.Error = fmt.Sprintf("%s: %s: %s", resp.Status, p.Title, p.Detail)
		} else {
			pm.Error = resp.Status
		}
		return pm
	}
	var ans api.StageChange
	if err := json.Unmarshal(raw, &ans); err != nil {
		pm.Error = err.Error()
		return pm
	}
	pm.Instance, pm.Stage = ans.Instance, ans.Stage
	return pm
}
