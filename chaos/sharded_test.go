package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// redis-sharded on a real Redis Cluster under its two faults (issue 35
// point 3): a bucket's slot moving between masters mid-burst, and the
// master of a bucket killed in a Cluster with replicas. Each burst's buys
// are checked with porcupine against the stock model.
//
// Without stock reads: the item's stock is the database's, which still
// counts a unit reserved in a bucket until its buyer's order commits. While
// that write is slow, the next buyers are rightly told sold out (the unit
// is going to the buyer who reserved it) and a read still shows it, a
// history no single counter explains. One run with readers, beside the
// stress hogs, was found illegal exactly so: reads showed 1 for about 350 ms
// after the first sold out, until the reserving buyer's commit.

// shardedBuckets is SECKILL_STOCK_BUCKETS of these tests.
const shardedBuckets = 4

// shardedEnv runs redis-sharded on the Cluster whose nodes are listed; the
// app's clients follow neither MOVED nor ASK (cmd/seckill/redisclients.go),
// so a call redirected answers 503 and the next one goes to the new owner.
func shardedEnv(nodes []string) map[string]string {
	return map[string]string{
		"SECKILL_STAGE":         "redis-sharded",
		"SECKILL_REDIS_ADDR":    strings.Join(nodes, ","),
		"SECKILL_STOCK_BUCKETS": strconv.Itoa(shardedBuckets),
		// A reservation whose reply a fault cut off is given back within
		// two request timeouts.
		"SECKILL_REQUEST_TIMEOUT": "3s",
	}
}

// bucketSlot is the Cluster slot of bucket b of product 1, as node says.
func bucketSlot(t *testing.T, node string, b int) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: node})
	defer c.Close()
	slot, err := c.ClusterKeySlot(context.Background(), fmt.Sprintf("seckill:{product:1:b%d}:stock", b)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(slot)
}

// slotOwner is the address of the master serving slot, as node sees it.
func slotOwner(t *testing.T, node string, slot int) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: node})
	defer c.Close()
	slots, err := c.ClusterSlots(context.Background()).Result()
	if err != nil {
		return ""
	}
	for _, r := range slots {
		if r.Start <= slot && slot <= r.End {
			return r.Nodes[0].Addr
		}
	}
	return ""
}

// replicaOf returns the process among procs that replicates master.
func replicaOf(t *testing.T, procs []*testenv.RedisProcess, master *testenv.RedisProcess) *testenv.RedisProcess {
	t.Helper()
	_, port, _ := strings.Cut(master.Addr, ":")
	for _, p := range procs {
		if p == master {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: p.Addr})
		info, err := c.Info(context.Background(), "replication").Result()
		_ = c.Close()
		if err != nil {
			t.Fatalf("INFO replication of %s: %v", p.Addr, err)
		}
		if strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port+"\r\n") {
			return p
		}
	}
	t.Fatalf("no process replicates %s", master.Addr)
	return nil
}

// roleOf is node's ROLE ("master" or "slave"), or "" when it does not
// answer.
func roleOf(node string) string {
	c := redis.NewClient(&redis.Options{Addr: node})
	defer c.Close()
	r, err := c.Do(context.Background(), "ROLE").Slice()
	if err != nil || len(r) == 0 {
		return ""
	}
	role, _ := r[0].(string)
	return role
}

// errorStat reads how many error replies with prefix (MOVED, ASK) node has
// sent (INFO errorstats).
func errorStat(t *testing.T, node, prefix string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: node})
	defer c.Close()
	info, err := c.Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatalf("INFO errorstats of %s: %v", node, err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "errorstat_"+prefix+":count="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func nodeID(t *testing.T, node string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: node})
	defer c.Close()
	id, err := c.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestShardedLinearizableSlotMigration moves the slot of one bucket from
// its master to another in the middle of a burst on two instances, in
// forced steps, each with no buy in flight: the burst is held while the
// slot is marked MIGRATING and IMPORTING and its keys are moved with
// MIGRATE; then buys that include buyers homed in that bucket are let go,
// and the old owner must answer them ASK (the instances still route the
// slot there); the burst is held again while the slot is handed over, and
// the rest of it meets the new owner. Whether a buyer then hears MOVED
// depends on whether its instance's client reloaded the slot map since the
// handover (go-redis reloads it after every ASK), so MOVED is counted, not
// required. Buyers whose call was redirected hear 503; the sale must be
// linearizable, exact and never oversold, and a buyer homed in the moved
// bucket must be served by the new owner on each instance.
func TestShardedLinearizableSlotMigration(t *testing.T) {
	r := newRig(t, rigOptions{})
	nodes := testenv.StartRedisCluster(t)
	env := shardedEnv(nodes)
	a, b := r.start("a", env), r.start("b", env)
	stock, requests := pick(40, 80), pick(120, 200)
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "redis-sharded on a 3-master Cluster: a bucket's slot migrated mid-burst (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE, the burst held at each step; ASK forced, MOVED counted), linearizability checked with porcupine", Stage: "redis-sharded"}
	r.record(f)

	slot := bucketSlot(t, nodes[0], 1)
	src := slotOwner(t, nodes[0], slot)
	dst := nodes[0]
	if dst == src {
		dst = nodes[1]
	}
	srcID, dstID := nodeID(t, src), nodeID(t, dst)
	node := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	srcC, dstC := node(src), node(dst)
	ctx := context.Background()
	asks := errorStat(t, src, "ASK")

	// The burst's phases: a quarter before the migration, then buys up to
	// the third buyer homed in bucket 1 while the slot migrates, then the
	// rest after the handover, which must still hold buyers homed there.
	homes := redisstage.NewRedisSharded(nil, nil, "product", shardedBuckets, nil)
	const prefix = "mig"
	homedAt1 := func(from, to int) (n int, end int) {
		for i := from; i < to; i++ {
			if homes.Home(fmt.Sprintf("%s-%d", prefix, i)) == 1 {
				if n++; n == 3 {
					return n, i + 1
				}
			}
		}
		return n, to
	}
	before := requests / 4
	n, during := homedAt1(before, requests)
	if after, _ := homedAt1(during, requests); n < 3 || after < 3 {
		t.Fatalf("the burst's users give %d buyers homed in bucket 1 while the slot migrates and %d after; want 3 each", n, after)
	}

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: 8, pace: 30 * time.Millisecond, deadline: 10 * time.Second, prefix: prefix, heldFrom: before})
	defer bu.openTo(-1) // a fatal step must not leave the burst's workers held
	if !bu.waitCompleted(before, 2*time.Minute) {
		t.Fatalf("%d of the first %d buys ended within 2 minutes", bu.completed.Load(), before)
	}
	w := window{from: bu.now()}
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("IMPORTING", dstC.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must("MIGRATING", srcC.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	host, port, _ := strings.Cut(dst, ":")
	for {
		keys, err := srcC.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		must("GETKEYSINSLOT", err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must("MIGRATE", srcC.Do(ctx, args...).Err())
	}
	bu.openTo(during)
	if !bu.waitCompleted(during, 2*time.Minute) {
		t.Fatalf("%d of the first %d buys ended within 2 minutes", bu.completed.Load(), during)
	}
	asked := errorStat(t, src, "ASK") - asks
	if asked == 0 {
		t.Fatal("no buyer was answered ASK while the slot was migrating")
	}
	moving := errorStat(t, src, "MOVED")
	for _, n := range nodes {
		must("SETSLOT NODE", node(n).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
	bu.openTo(-1)
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w.to = bu.now()
	t.Logf("slot %d of bucket 1 moved from %s to %s; %d ASK answers while it migrated, %d MOVED after the handover", slot, src, dst, asked, errorStat(t, src, "MOVED")-moving)
	r.verify(f, calls, stock, w, expect{slugs: []string{"sold-out", "unavailable", "timeout", "outcome-unknown"}}, a)
	checkLinearizable(t, calls, stock)

	// The new owner serves the moved bucket: on each instance, a buyer
	// homed there is answered (a unit or sold out), not 503, within a few
	// tries (a client that was answered MOVED reloads its map first).
	for _, in := range []*instance{a, b} {
		var last string
		served := testkit.Poll(30*time.Second, func() bool {
			for i := 0; ; i++ {
				if u := fmt.Sprintf("after-%s-%d-%d", in.name, time.Now().UnixNano(), i); homes.Home(u) == 1 {
					status, body := r.do(in, "POST", "/api/v1/products/1/buy", nil, fmt.Sprintf(`{"user_id":%q}`, u))
					last = fmt.Sprintf("%d %s", status, body)
					return status != 503
				}
			}
		})
		if !served {
			t.Errorf("30s after the handover a buyer homed in the moved bucket still hears %s from instance %s", last, in.name)
		}
	}
}

// TestShardedLinearizableFailover kills (SIGKILL) the master of bucket 1
// in a Cluster of three masters with a replica each, in the middle of a
// burst on two instances. Until the replica is promoted, every buyer homed
// in a bucket of the dead master must hear 503 (never sold out, never a
// 201); the sale must be linearizable, exact and never oversold.
func TestShardedLinearizableFailover(t *testing.T) {
	r := newRig(t, rigOptions{})
	procs := testenv.StartRedisClusterWithReplicas(t, 1)
	var nodes []string
	for _, p := range procs {
		nodes = append(nodes, p.Addr)
	}
	env := shardedEnv(nodes)
	a, b := r.start("a", env), r.start("b", env)
	stock, requests := pick(100, 150), pick(300, 400)
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "redis-sharded on a Cluster of 3 masters with a replica each: the master of a bucket SIGKILLed mid-burst, its replica promoted; buyers homed there must hear 503 until then, linearizability checked with porcupine", Stage: "redis-sharded"}
	r.record(f)

	victimAddr := slotOwner(t, nodes[0], bucketSlot(t, nodes[0], 1))
	var victim *testenv.RedisProcess
	var survivor string
	for _, p := range procs {
		if p.Addr == victimAddr {
			victim = p
		} else if survivor == "" {
			survivor = p.Addr
		}
	}
	if victim == nil {
		t.Fatalf("bucket 1's master %s is none of the processes started", victimAddr)
	}
	dead := map[int]bool{} // the buckets on the victim
	for bk := range shardedBuckets {
		dead[bk] = slotOwner(t, survivor, bucketSlot(t, survivor, bk)) == victimAddr
	}

	heir := replicaOf(t, procs, victim)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: 8, pace: 30 * time.Millisecond, deadline: 10 * time.Second, prefix: "fo"})
	bu.waitCompleted(requests/4, 30*time.Second)
	left := int64(requests) - bu.completed.Load()
	w := window{from: bu.now()}
	victim.Kill()
	// masterless: the last moment the victim's replica was seen still a
	// replica. Until then no node could take the dead buckets' writes; the
	// survivor's view below learns of the promotion later, by gossip, and
	// a buyer may be served by the new master in between.
	masterless := w.from
	if !testkit.Poll(60*time.Second, func() bool {
		if at := bu.now(); roleOf(heir.Addr) == "slave" {
			masterless = at
		}
		o := slotOwner(t, survivor, bucketSlot(t, survivor, 1))
		return o != "" && o != victimAddr
	}) {
		t.Fatal("bucket 1's replica was not promoted within 60s")
	}
	w.to = bu.now()
	calls, err := bu.wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	homes := redisstage.NewRedisSharded(nil, nil, "product", shardedBuckets, nil)
	routed, refused := 0, 0
	for _, c := range calls {
		if c.Op != "buy" || !dead[homes.Home(c.User)] || c.Start < w.from || c.End > masterless {
			continue
		}
		routed++
		if c.Outcome == outRefused && (c.Problem == "unavailable" || c.Problem == "timeout" || c.Problem == "outcome-unknown") {
			refused++
			continue
		}
		t.Errorf("buy %d of %s, homed on the dead master during the failover: %s %d %s", c.ID, c.User, c.Outcome, c.Status, c.Problem)
	}
	t.Logf("master %s killed at %v, its replica last seen a replica at %v, promoted in the survivor's view at %v; %d buys homed there while no master had them, %d answered 503",
		victimAddr, w.from, masterless, w.to, routed, refused)
	if left <= 0 || routed == 0 {
		t.Errorf("the kill hit no buyer of the dead master (%d buys left, %d routed there during the failover)", left, routed)
	}
	r.verify(f, calls, stock, w, expect{slugs: []string{"sold-out", "unavailable", "timeout", "outcome-unknown"}}, a)
	checkLinearizable(t, calls, stock)

	// The promoted replica serves the dead master's buckets: a buyer homed
	// there is answered (a unit or sold out), not 503, within a few tries.
	var last string
	served := testkit.Poll(30*time.Second, func() bool {
		for i := 0; ; i++ {
			if u := fmt.Sprintf("after-%d-%d", time.Now().UnixNano(), i); dead[homes.Home(u)] {
				status, body := r.do(a, "POST", "/api/v1/products/1/buy", nil, fmt.Sprintf(`{"user_id":%q}`, u))
				last = fmt.Sprintf("%d %s", status, body)
				return status != 503
			}
		}
	})
	if !served {
		t.Errorf("30s after the failover a buyer homed on the promoted replica still hears %s", last)
	}
}
