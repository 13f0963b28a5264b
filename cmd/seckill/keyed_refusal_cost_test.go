package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestKeyedLateBuyerCostsOneRoundTripInRedisStages: docs/api.md promises
// that under redis-atomic and redis-stream, with the Idempotency-Key
// records on the stage's own Redis, a sold-out refusal of a keyed buyer
// "costs one round trip, as without a key": the claim's script runs the
// stage's read-only check and claims nothing. Wrapping those stages in the
// sold-out memory (Crowd.Wrap) removed their refusal check
// (crowded.refusalCheck answers false when w.m != nil), so a keyed late
// buyer now claims the key and then abandons it: two scripts that write,
// where there was one that reads. The memory only helps buyers without a
// key, and a flash crowd's buyers send one.
func TestKeyedLateBuyerCostsOneRoundTripInRedisStages(t *testing.T) {
	skipShort(t)
	rdb := newCountingClient(t, testenv.StartRedis(t).Addr)
	call := soloInstance(t, rdb.Client)
	for _, stage := range []string{inventory.StageRedisAtomic, inventory.StageRedisStream} {
		t.Run(stage, func(t *testing.T) {
			if code, body := call("PUT", "/api/v1/admin/stage", fmt.Sprintf(`{"stage":%q}`, stage), ""); code != 200 {
				t.Fatalf("stage switch: %d %s", code, body)
			}
			if code, body := call("POST", "/api/v1/admin/products/2/reset", `{"stock":1}`, ""); code != 200 {
				t.Fatalf("reset: %d %s", code, body)
			}
			if code, body := call("POST", "/api/v1/products/2/buy", fmt.Sprintf(`{"user_id":%q}`, stage+"-winner"), ""); code != 201 && code != 202 {
				t.Fatalf("the one unit: %d %s", code, body)
			}
			// Until the unit is written (redis-stream) the refusal is "for
			// now"; once it is "for good", the instance remembers it.
			testkit.Eventually(t, "the sell-out is remembered", 10*time.Second, func() bool {
				code, body := call("POST", "/api/v1/products/2/buy", fmt.Sprintf(`{"user_id":%q}`, testenv.Name(stage+"-learner")), "")
				if code != 409 {
					t.Fatalf("learner: %d %s", code, body)
				}
				rdb.names()
				code, _ = call("POST", "/api/v1/products/2/buy", fmt.Sprintf(`{"user_id":%q}`, testenv.Name(stage+"-probe")), "")
				return code == 409 && len(rdb.names()) == 0
			})
			// A first keyed buyer loads the scripts (NOSCRIPT, then EVAL):
			// not counted.
			if code, body := call("POST", "/api/v1/products/2/buy", fmt.Sprintf(`{"user_id":"%s-warm"}`, stage), testenv.Name("key")); code != 409 {
				t.Fatalf("keyed warm-up buyer: %d %s", code, body)
			}
			for i := range 5 {
				rdb.names()
				code, body := call("POST", "/api/v1/products/2/buy", fmt.Sprintf(`{"user_id":"%s-late-%d"}`, stage, i), testenv.Name("key"))
				if code != 409 {
					t.Fatalf("keyed late buyer %d: %d %s, want 409", i, code, body)
				}
				if sent := rdb.names(); len(sent) > 1 {
					t.Fatalf("a keyed late buyer sent %d commands to Redis (%q); docs/api.md promises one round trip, as without a key", len(sent), sent)
				}
			}
		})
	}
}
