package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestRedisClusterBackend runs two instances on a three-master Redis Cluster
// (SECKILL_REDIS_ADDR lists the nodes): the lock, the redis-atomic scripts,
// the idempotency records and the reconcile job must all work, which means
// every multi-key script stays inside one hash slot (no CROSSSLOT).
func TestRedisClusterBackend(t *testing.T) {
	skipShort(t)
	nodes := testenv.StartRedisCluster(t)
	db := testenv.SQLite(t)
	env := map[string]string{
		"SECKILL_REDIS_ADDR":             strings.Join(nodes, ","),
		"SECKILL_ADMIN_TOKEN":            fleetToken,
		"SECKILL_RECONCILE_INTERVAL":     "200ms",
		"SECKILL_CRITICAL_SECTION_DELAY": "0s",
		"SECKILL_LOCK_WAIT":              "20s",
		"SECKILL_REQUEST_TIMEOUT":        "60s",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	rdb := newRedisClient(config.Config{RedisAddrs: cfg.RedisAddrs}) // the app's client
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("several SECKILL_REDIS_ADDR nodes must give a cluster client, got %T", rdb)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	b := backends{db: db, redis: rdb}
	urls := serveInstances(t, cfg, b, 2, "cluster")
	f := &fleet{t: t, urls: urls, client: &http.Client{Timeout: 30 * time.Second}}
	admin := map[string]string{"Authorization": "Bearer " + fleetToken}
	for _, kind := range []string{"products", "coupons"} {
		code, body := f.call("POST", urls[0]+"/api/v1/admin/"+kind+"/1/reset", `{"stock":20}`, admin)
		if code != 200 {
			t.Fatalf("reset %s: %d %s", kind, code, body)
		}
	}
	for _, stage := range []string{"redis-lock", "redis-atomic"} {
		for _, kind := range []string{"products", "coupons"} {
			path, verb := "/api/v1/"+kind+"/1/", "buy"
			if kind == "coupons" {
				verb = "grab"
			}
			// 20 units: redis-lock sells to all 15 buyers, then redis-atomic
			// sells the last 5 units to 5 of its 15.
			want := map[string]int{"redis-lock": 15, "redis-atomic": 5}[stage]
			codes := f.burst(stage, path+verb, 15, func(i int) string { return fmt.Sprintf(`{"user_id":"%s-%d"}`, stage, i) })
			if codes[201] != want || codes[409] != 15-want {
				t.Fatalf("%s %s on the cluster: answers %v, want %d created", stage, kind, codes, want)
			}
		}
	}
	for _, kind := range []string{"products", "coupons"} {
		a := f.audit(kind, 1)
		if a.Sold != 20 || a.Stock != 0 || a.Oversold != 0 || !a.Conserved {
			t.Errorf("%s: 30 buyers on 20 units over the cluster: %+v", kind, a)
		}
	}
	// An idempotent retry is replayed from the cluster.
	hdr := map[string]string{"Idempotency-Key": "cluster-key"}
	c1, b1 := f.call("POST", urls[0]+"/api/v1/products/2/buy", `{"user_id":"idem"}`, hdr)
	c2, b2 := f.call("POST", urls[1]+"/api/v1/products/2/buy", `{"user_id":"idem"}`, hdr)
	if c1 != 201 || c2 != 201 || string(b1) != string(b2) {
		t.Fatalf("idempotent replay across instances: %d %s / %d %s", c1, b1, c2, b2)
	}
	// The reconcile job runs against the cluster and publishes its result.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := f.call("GET", urls[1]+"/api/v1/products/1/audit", "", nil)
		if code == 200 && strings.Contains(string(body), `"reconcile":{`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconcile result on the cluster: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// redis-sharded spreads one item's buckets over the shards: the
	// whole app sells exactly on them, and the reconcile job checks them.
	for _, kind := range []string{"products", "coupons"} {
		if code, body := f.call("POST", urls[0]+"/api/v1/admin/"+kind+"/1/reset", `{"stock":12}`, admin); code != 200 {
			t.Fatalf("reset %s: %d %s", kind, code, body)
		}
		verb := map[string]string{"products": "buy", "coupons": "grab"}[kind]
		codes := f.burst("redis-sharded", "/api/v1/"+kind+"/1/"+verb, 30, func(i int) string { return fmt.Sprintf(`{"user_id":"sharded-%d"}`, i) })
		if a := f.audit(kind, 1); codes[201] != 12 || codes[409] != 18 || a.Sold != 12 || a.Stock != 0 || !a.Conserved {
			t.Fatalf("redis-sharded %s on the cluster: answers %v audit %+v, want 12 sold of 12", kind, codes, a)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := f.call("GET", urls[1]+"/api/v1/products/1/audit", "", nil)
		if code == 200 && strings.Contains(string(body), `"bucket_drift":{"redis_stock":0,"db_stock":0`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconcile result with the buckets on the cluster: %s", body)
		}
	}
}
