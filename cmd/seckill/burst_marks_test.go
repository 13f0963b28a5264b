package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/story"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// heldPeer is the fleet a burst fires at: the first buy it gets is held
// until release is closed, so the burst that sent it stays in flight as
// long as the test wants; every other buy is answered at once.
type heldPeer struct {
	arrived chan struct{} // closed when the first buy is in
	release chan struct{}
	once    sync.Once
}

func (p *heldPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/buy"):
		first := false
		p.once.Do(func() { first = true })
		if first {
			close(p.arrived)
			select {
			case <-p.release:
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{}`))
	case r.URL.Path == "/api/v1/info":
		_ = json.NewEncoder(w).Encode(api.Info{Instance: "held", Stage: "db-atomic", Stages: []string{"db-atomic"}})
	default: // the audit, /healthz, /readyz
		_, _ = w.Write([]byte(`{}`))
	}
}

// TestBurstInFlightRefusesASecondBurstAndAResetFleetWide: two instances
// over one MySQL database. While a burst fired through the first is in
// flight (its first buyer held), a burst of the same product through the
// second is refused 409 burst-in-progress, and so is a reset of it;
// `seckill story` against the second stops with an error that says so.
// Once the first burst ends the product is free again.
func TestBurstInFlightRefusesASecondBurstAndAResetFleetWide(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	dsn := testenv.MySQLDSN(t)
	peer := &heldPeer{arrived: make(chan struct{}), release: make(chan struct{})}
	held := httptest.NewServer(peer)
	defer held.Close()
	released := false
	release := func() {
		if !released {
			released = true
			close(peer.release)
		}
	}
	defer release()

	env := map[string]string{
		"SECKILL_ADMIN_TOKEN":        fleetToken,
		"SECKILL_STAGE":              "db-atomic",
		"SECKILL_RECONCILE_INTERVAL": "0s",
		"SECKILL_PEERS":              held.URL,
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for i := range 2 {
		// Each instance has its own pool, as two processes would.
		db, err := openMySQL(ctx, dsn, store.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		b := backends{db: db}
		t.Cleanup(func() { closeBackends(b, slog.New(slog.DiscardHandler)) })
		urls = append(urls, serveInstances(t, cfg, b, 1, fmt.Sprintf("marks-%d", i+1))...)
	}
	client := &http.Client{Timeout: time.Minute}
	call := func(url, body string) (int, api.Problem) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+fleetToken)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var p api.Problem
		_ = json.Unmarshal(raw, &p)
		return resp.StatusCode, p
	}
	const burst = `{"kind":"product","item_id":1,"n":2}`

	first := make(chan int, 1)
	go func() {
		code, _ := call(urls[0]+"/api/v1/admin/burst", burst)
		first <- code
	}()
	select {
	case <-peer.arrived:
	case code := <-first:
		t.Fatalf("the first burst answered %d before its held buyer arrived", code)
	}

	wantRefused := func(what string, code int, p api.Problem) {
		t.Helper()
		if code != http.StatusConflict || p.Type != api.ProblemTypePrefix+"burst-in-progress" {
			t.Errorf("%s while a burst of the product is in flight on another instance: %d %q, want 409 %sburst-in-progress", what, code, p.Type, api.ProblemTypePrefix)
		}
	}
	code, p := call(urls[1]+"/api/v1/admin/burst", burst)
	wantRefused("a second burst", code, p)
	code, p = call(urls[1]+"/api/v1/admin/products/1/reset", `{"stock":10}`)
	wantRefused("a reset", code, p)

	out := &testkit.SyncBuffer{}
	err = run(ctx, []string{"story", "-url", urls[1], "-token", fleetToken, "-no-demo", "-stages", "db-atomic", "-buyers", "2", "-stock", "1"},
		func(string) string { return "" }, out, io.Discard)
	if !errors.Is(err, story.ErrBurstInProgress) || !strings.Contains(fmt.Sprint(err), "another burst of this product is running") {
		t.Errorf("story while another burst of its product is in flight: err %v, want one saying another burst is running\n%s", err, out)
	}

	release()
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the held burst answered %d, want 200", code)
	}
	// Its mark is gone with it: the next burst and reset run.
	if code, p := call(urls[1]+"/api/v1/admin/burst", burst); code != http.StatusOK {
		t.Errorf("a burst after the first ended: %d %q, want 200", code, p.Type)
	}
	if code, p := call(urls[1]+"/api/v1/admin/products/1/reset", `{"stock":10}`); code != http.StatusOK {
		t.Errorf("a reset after the bursts ended: %d %q, want 200", code, p.Type)
	}
}
