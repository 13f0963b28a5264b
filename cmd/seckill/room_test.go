package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestDemoRoomAcrossInstances: the demo's instances share one room key,
// so a ticket given by one is polled at another, whose pass buys at a
// third; a buy without the pass is refused.
func TestDemoRoomAcrossInstances(t *testing.T) {
	skipShort(t)
	d := startDemo(t, map[string]string{"SECKILL_STAGE": "redis-atomic"})
	if len(d.instances) < 3 {
		t.Fatalf("the demo runs %d instances", len(d.instances))
	}
	f := &fleet{t: t, urls: d.instances, client: &http.Client{Timeout: time.Minute}}
	admin := map[string]string{"Authorization": "Bearer demo-test-token"}
	if code, body := f.call("POST", f.urls[0]+"/api/v1/admin/products/2/reset", `{"stock":3}`, admin); code != 200 {
		t.Fatalf("reset: %d %s", code, body)
	}
	if code, body := f.call("PUT", f.urls[0]+"/api/v1/admin/products/2/room", `{"passes_per_second":1000,"max_inside":5}`, admin); code != 200 {
		t.Fatalf("setting the room: %d %s", code, body)
	}
	// The dashboard's burst, whose buyers bring no pass, buys nothing.
	code, body := f.call("POST", f.urls[0]+"/api/v1/admin/burst", `{"kind":"product","item_id":2,"n":20}`, admin)
	var br api.BurstResult
	if code != http.StatusOK || json.Unmarshal(body, &br) != nil || br.Counts.Created+br.Counts.Accepted != 0 || br.Counts.Other4xx != 20 {
		t.Fatalf("a burst of buyers without passes: %d %s", code, body)
	}
	code, body = f.call("POST", f.urls[0]+"/api/v1/products/2/room/join", `{"user_id":"alice"}`, nil)
	var tk api.RoomTicket
	if code != http.StatusCreated || json.Unmarshal(body, &tk) != nil {
		t.Fatalf("join: %d %s", code, body)
	}
	var st api.RoomStatus
	testkit.Eventually(t, "a pass from the second instance", 20*time.Second, func() bool {
		code, body := f.call("POST", f.urls[1]+"/api/v1/products/2/room/poll", fmt.Sprintf(`{"user_id":"alice","ticket":%q}`, tk.Ticket), nil)
		if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Fatalf("poll at the second instance: %d %s", code, body)
		}
		return st.State == "admitted"
	})
	if code, body := f.call("POST", f.urls[2]+"/api/v1/products/2/buy", `{"user_id":"bob"}`, nil); code != http.StatusForbidden || problemOf(body) != api.ProblemTypePrefix+"pass-required" {
		t.Fatalf("a buy without a pass: %d %s", code, body)
	}
	if code, body := f.call("POST", f.urls[2]+"/api/v1/products/2/buy", `{"user_id":"alice"}`, map[string]string{api.PassHeader: st.Pass}); code != http.StatusCreated {
		t.Fatalf("a buy with the pass at the third instance: %d %s", code, body)
	}
}
