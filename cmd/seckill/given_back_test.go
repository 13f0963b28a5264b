package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// TestAuditListsTheUnitsGivenBack: on the demo, a buyer who already holds
// an order (bought under db-atomic after the Redis copy was loaded, so the
// copy does not know them) buys again under each Redis stage that
// reserves. The stage takes a unit, the database refuses the second
// order, and the unit goes back: every instance's audit must list it in
// given_back, which the lab reads; a reset empties the list.
func TestAuditListsTheUnitsGivenBack(t *testing.T) {
	t.Parallel()
	d := startDemo(t, nil)
	const token = "demo-test-token" // startDemo's
	f := &fleet{t: t, urls: d.instances, client: &http.Client{Timeout: time.Minute}}
	for id, stage := range map[int]string{1: "redis-atomic", 2: "redis-sharded"} {
		t.Run(stage, func(t *testing.T) {
			f.t = t
			admin := map[string]string{"Authorization": "Bearer " + token}
			reset := func() {
				if code, body := f.call("POST", fmt.Sprintf("%s/api/v1/admin/products/%d/reset", f.urls[0], id), `{"stock":5}`, admin); code != http.StatusOK {
					t.Fatalf("reset: %d %s", code, body)
				}
			}
			reset()
			buy := func(stage, user string) (int, []byte) {
				return f.call("POST", fmt.Sprintf("%s/api/v1/products/%d/buy", f.urls[0], id), fmt.Sprintf(`{"user_id":%q}`, user),
					map[string]string{"X-Seckill-Stage": stage, "Authorization": "Bearer " + token})
			}
			// A first buy under the stage loads its Redis copy.
			if code, body := buy(stage, "first"); code != http.StatusCreated {
				t.Fatalf("first buy under %s: %d %s", stage, code, body)
			}
			if code, body := buy("db-atomic", "twice"); code != http.StatusCreated {
				t.Fatalf("buy under db-atomic: %d %s", code, body)
			}
			if code, body := buy(stage, "twice"); code != http.StatusConflict || problemOf(body) != api.ProblemTypePrefix+"already-purchased" {
				t.Fatalf("second buy of one buyer under %s: %d %s; want 409 already-purchased", stage, code, body)
			}
			audit := func(in int) api.Audit {
				code, body := f.call("GET", fmt.Sprintf("%s/api/v1/products/%d/audit", f.urls[in], id), "", nil)
				var a api.Audit
				if code != http.StatusOK || json.Unmarshal(body, &a) != nil {
					t.Fatalf("audit: %d %s", code, body)
				}
				return a
			}
			for in := range f.urls {
				a := audit(in)
				if len(a.GivenBack) != 1 || a.GivenBack[0].Units != 1 || a.GivenBack[0].At.Before(a.GivenBack[0].ReservedAt) {
					t.Fatalf("instance %d: given_back %+v; want the one unit of the refused second order", in+1, a.GivenBack)
				}
				if a.Sold != 2 || !a.Conserved {
					t.Fatalf("instance %d: %+v; want 2 sold, conserved", in+1, a)
				}
			}
			reset()
			if a := audit(1); len(a.GivenBack) != 0 {
				t.Fatalf("given_back after a reset: %+v; want none", a.GivenBack)
			}
		})
	}
}
