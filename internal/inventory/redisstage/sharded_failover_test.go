package redisstage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// failoverCluster is a three-master Redis Cluster with a replica per
// master, a client of it whose connections a test can break, and
// redis-sharded selling one product of a MySQL database from buckets on
// every master.
type failoverCluster struct {
	procs  []*testenv.RedisProcess
	faults *testkit.NetFaults
	rdb    *redis.ClusterClient
	db     *store.DB
	ns     string
	id     int64
	stage  *redisstage.RedisSharded
	svcs   []*inventory.Service
}

func newFailoverCluster(t *testing.T, ctx context.Context, stock int) *failoverCluster {
	t.Helper()
	db := testenv.MySQL(t) // first: without MySQL the test skips before it starts six servers
	c := &failoverCluster{procs: testenv.StartRedisClusterWithReplicas(t, 1), faults: &testkit.NetFaults{}, db: db, id: 1}
	var addrs []string
	for _, p := range c.procs {
		addrs = append(addrs, p.Addr)
	}
	// As the app's client (cmd/seckill/redisclients.go): every command
	// sent once, the slot map reread once it is a second old.
	c.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, MaxRedirects: -1,
		ClusterStateReloadInterval: time.Second, Dialer: c.faults.Dial})
	t.Cleanup(func() { _ = c.rdb.Close() })
	c.ns, _ = spreadNamespace(t, ctx, c.rdb, c.id, shardedBuckets)
	c.stage = redisstage.NewRedisSharded(c.rdb, c.db.Products(), c.ns, shardedBuckets, nil)
	for i := range 3 {
		c.svcs = append(c.svcs, inventory.NewService(c.db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: c.stage}, fmt.Sprintf("f%d", i), "O"))
	}
	if err := c.svcs[0].Reset(ctx, c.id, stock); err != nil {
		t.Fatal(err)
	}
	return c
}

// masterOf returns the process of the master that serves key, and its
// replica.
func (c *failoverCluster) masterOf(t *testing.T, ctx context.Context, key string) (master, replica *testenv.RedisProcess) {
	t.Helper()
	slot, err := c.rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := c.rdb.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	byAddr := func(addr string) *testenv.RedisProcess {
		for _, p := range c.procs {
			if p.Addr == addr {
				return p
			}
		}
		t.Fatalf("no process listens on %s", addr)
		return nil
	}
	for _, r := range slots {
		if int64(r.Start) > slot || slot > int64(r.End) {
			continue
		}
		master = byAddr(r.Nodes[0].Addr)
		// The replica, as the replicas themselves say (another node's
		// slot map may not list it yet).
		_, port, _ := strings.Cut(master.Addr, ":")
		for _, p := range c.procs {
			repl, err := p.Client().Info(ctx, "replication").Result()
			if err == nil && strings.Contains(repl, "role:slave") && strings.Contains(repl, "master_port:"+port+"\r\n") {
				return master, p
			}
		}
		t.Fatalf("the master %s of slot %d has no replica", master.Addr, slot)
	}
	t.Fatalf("no master serves slot %d", slot)
	return nil, nil
}

// waitReplicated returns once replica has applied everything master had
// written when it was called: its replication offset reaches master's.
// (A WAIT on a connection of the test's own that wrote nothing counts
// nothing of the stage's writes, and a WAIT 1 0 outlived the client's 3 s
// read timeout beside CPU hogs: "i/o timeout".)
func waitReplicated(t *testing.T, ctx context.Context, master, replica *testenv.RedisProcess) {
	t.Helper()
	offset := func(p *testenv.RedisProcess, field string) int64 {
		info, err := p.Client().Info(ctx, "replication").Result()
		if err != nil {
			return -1
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					return n
				}
			}
		}
		return -1
	}
	want := offset(master, "master_repl_offset")
	if want < 0 {
		t.Fatalf("no replication offset on the master %s", master.Addr)
	}
	testkit.Eventually(t, "the replica "+replica.Addr+" to reach the master's offset", 2*time.Minute, func() bool {
		return offset(replica, "slave_repl_offset") >= want
	})
}

// killAndWaitFailover SIGKILLs master and waits until replica serves its
// slots, as the surviving masters see it.
func (c *failoverCluster) killAndWaitFailover(t *testing.T, master, replica *testenv.RedisProcess) {
	t.Helper()
	master.Kill()
	testkit.Eventually(t, "the replica "+replica.Addr+" to take over the slots of the killed master "+master.Addr, 2*time.Minute, func() bool {
		repl, err := replica.Client().Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(repl, "role:master")
	})
}

// buyUntilDecided buys for user as a client that retries whatever did not
// decide (a refusal with nothing written, an unknown outcome), and returns
// the order and the answer that decided, with every answer heard on the
// way.
func buyUntilDecided(ctx context.Context, svc *inventory.Service, id int64, user string) (inventory.Order, error, []error) {
	var heard []error
	for {
		o, err := svc.Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: id, UserID: user, Quantity: 1})
		if err == nil || !inventory.Transient(err) || ctx.Err() != nil {
			return o, err, heard
		}
		heard = append(heard, err)
		// A client's back-off between tries.
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkAnswers checks what each buyer was told against MySQL's rows: a
// buyer told bought holds that order, one told "already purchased" holds
// an order, one refused or left undecided holds none, and no row belongs
// to a buyer who was not told so.
func checkAnswers(t *testing.T, ctx context.Context, db *store.DB, id int64, told map[string]inventory.Order, final map[string]error) {
	t.Helper()
	holders := map[string]bool{}
	for user, err := range final {
		row, rerr := db.Products().OrderOf(ctx, id, user)
		has := rerr == nil
		if rerr != nil && !errors.Is(rerr, inventory.ErrOrderNotFound) {
			t.Fatalf("reading the order of %s: %v", user, rerr)
		}
		switch {
		case err == nil:
			holders[user] = true
			if !has || row.No != told[user].No {
				t.Errorf("%s was told it bought order %s; MySQL holds %q (%v)", user, told[user].No, row.No, rerr)
			}
		case errors.Is(err, inventory.ErrAlreadyPurchased):
			holders[user] = true
			if !has {
				t.Errorf("%s was told %q; MySQL holds no order of it", user, err)
			}
		case has:
			t.Errorf("%s was told %q; MySQL holds its order %s", user, err, row.No)
		}
	}
	a, err := db.Products().Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if a.Sold != len(holders) || a.Oversold() != 0 || !a.Conserved() {
		t.Errorf("audit %+v, with %d buyers told they hold an order", a, len(holders))
	}
}

// TestShardedLostReplyOnAMasterThatDies forces what a buyer lives through
// when the master of its home bucket dies: the bucket script ran there
// (the buyer recorded, a unit reserved) and reached the replica, its reply
// was lost, and the master was killed before the buy could forget the
// buyer. The retry may first fail on the dead master, and then try to
// forget the buyer on the replica that took over. The buyer heard 503 unavailable, which
// promises that no order was written. Its retry, once the replica took
// over, must be answered truly against MySQL: it buys, or hears "already
// purchased" only when it holds an order. Its buy takes over the unit the
// lost run reserved, which does not wait for the reconcile job.
func TestShardedLostReplyOnAMasterThatDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const stock = 8
	c := newFailoverCluster(t, ctx, stock)
	user := "lost-reply"
	home := c.stage.Home(user)
	keys := c.stage.BucketKeysForTest(c.id, home)
	master, replica := c.masterOf(t, ctx, keys[0])

	// A buyer of the same home first: the bucket script is then in the
	// master's script cache, so the lost reply below is the script's
	// own, not a NOSCRIPT's.
	warm := ""
	for i := 0; warm == ""; i++ {
		if u := fmt.Sprintf("warm-%d", i); c.stage.Home(u) == home {
			warm = u
		}
	}
	told := map[string]inventory.Order{}
	final := map[string]error{}
	o, err := c.svcs[0].Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: c.id, UserID: warm, Quantity: 1})
	if err != nil {
		t.Fatalf("the first buyer of bucket %d: %v", home, err)
	}
	told[warm], final[warm] = o, nil

	// The script's reply is lost; the script that would forget the buyer
	// never reaches the master, as if it had died at once.
	takeSHA, forgetSHA := redisstage.ShardedScriptsForTest()
	mine := func(sha string) func(req []byte) bool {
		return func(req []byte) bool {
			return bytes.Contains(req, []byte(sha)) && bytes.Contains(req, []byte(keys[2])) && bytes.Contains(req, []byte(user))
		}
	}
	c.faults.Drop(1, mine(takeSHA))
	c.faults.Delay(1, mine(forgetSHA))
	_, err = c.svcs[1].Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: c.id, UserID: user, Quantity: 1})
	if c.faults.Dropped() != 1 || c.faults.Held() != 1 {
		t.Fatalf("the bucket script's reply was not dropped, or the forgetting not held (%d dropped, %d held): %v", c.faults.Dropped(), c.faults.Held(), err)
	}
	t.Logf("the buy whose reply was lost: %v", err)
	if !inventory.Transient(err) {
		t.Fatalf("a buy whose reply was lost answered %v, want an answer to retry", err)
	}
	mc := master.Client()
	if in, err := mc.SIsMember(ctx, keys[2], user).Result(); err != nil || !in {
		t.Fatalf("the bucket script did not record %s on the master (%v, %v)", user, in, err)
	}
	// The write reached the replica before the master died.
	waitReplicated(t, ctx, master, replica)
	c.killAndWaitFailover(t, master, replica)
	if in, err := replica.Client().SIsMember(ctx, keys[2], user).Result(); err != nil || !in {
		t.Fatalf("the promoted replica does not hold the record of %s (%v, %v)", user, in, err)
	}

	// The retry's first try is cut before its script reaches the new
	// master (held, never delivered); the forgetting that follows it
	// reaches the new master.
	c.faults.Delay(1, mine(takeSHA))
	for c.faults.Held() < 2 {
		if _, err := c.svcs[2].Buy(ctx, inventory.StageRedisSharded, inventory.Request{ItemID: c.id, UserID: user, Quantity: 1}); !inventory.Transient(err) {
			t.Fatalf("a try of the retry answered %v before its script was held", err)
		}
	}
	o, err, heard := buyUntilDecided(ctx, c.svcs[2], c.id, user)
	t.Logf("the retry: %v (after %d undecided answers)", err, len(heard))
	told[user], final[user] = o, err
	checkAnswers(t, ctx, c.db, c.id, told, final)

	// The retry took over the lost run's reservation: no unit waits for
	// the reconcile job.
	var left int
	for b := range shardedBuckets {
		k := c.stage.BucketKeysForTest(c.id, b)
		n, err := c.rdb.Get(ctx, k[0]).Int()
		if err != nil {
			t.Fatalf("bucket %d: %v", b, err)
		}
		if in := c.rdb.HGetAll(ctx, k[1]).Val(); len(in) != 0 {
			t.Errorf("bucket %d holds reservations once every buyer has its answer: %v", b, in)
		}
		left += n
	}
	it, err := c.db.Products().Get(ctx, c.id)
	if err != nil {
		t.Fatal(err)
	}
	if left != it.Stock {
		t.Errorf("the buckets hold %d units once every buyer has its answer, the database %d", left, it.Stock)
	}
}

// TestShardedMasterKilledMidBurst kills, in the middle of a burst, the
// master that holds one of the item's buckets, on a real three-master
// Cluster with a replica each, with a reply lost as it dies (a buyer
// recorded there, told 503). Buyers keep arriving, and each retries
// whatever did not decide (503 unavailable while the replica takes over)
// until it hears an answer that does. Every buyer must end decided, and
// every answer must be true against MySQL's rows: bought means that order,
// "already purchased" an order held, a refusal none; the stock is
// conserved, and all of it sold.
func TestShardedMasterKilledMidBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const (
		stock     = 40
		buyers    = 160
		workers   = 8
		killAfter = 20 // answers decided before the kill
	)
	c := newFailoverCluster(t, ctx, stock)
	master, replica := c.masterOf(t, ctx, c.stage.BucketKeysForTest(c.id, shardedBuckets-1)[0])

	var (
		mu      sync.Mutex
		told    = map[string]inventory.Order{}
		final   = map[string]error{}
		retried int
		decided atomic.Int64
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	killNow := make(chan struct{})
	var killOnce sync.Once
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := next.Add(1); b <= buyers; b = next.Add(1) {
				user := fmt.Sprintf("burst-%03d", b)
				o, err, heard := buyUntilDecided(ctx, c.svcs[w%len(c.svcs)], c.id, user)
				mu.Lock()
				told[user], final[user] = o, err
				retried += len(heard)
				mu.Unlock()
				if decided.Add(1) == killAfter {
					killOnce.Do(func() { close(killNow) })
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-killNow:
	case <-done:
		t.Fatal("the burst ended before the kill")
	}
	// The master dies as Docker kills a container: the replies it had
	// not sent are lost with it, although their scripts ran and reached
	// the replica. Here, the next buyer recorded in the bucket loses its
	// reply, and the scripts that would forget buyers there never reach
	// the master.
	buyersKey := []byte(c.stage.BucketKeysForTest(c.id, shardedBuckets-1)[2])
	takeSHA, forgetSHA := redisstage.ShardedScriptsForTest()
	c.faults.Drop(1, func(req []byte) bool { return bytes.Contains(req, buyersKey) && bytes.Contains(req, []byte(takeSHA)) })
	c.faults.Delay(buyers, func(req []byte) bool { return bytes.Contains(req, buyersKey) && bytes.Contains(req, []byte(forgetSHA)) })
	testkit.Eventually(t, "a buyer recorded in the bucket to lose its reply", 2*time.Minute, func() bool { return c.faults.Dropped() == 1 })
	waitReplicated(t, ctx, master, replica)
	c.killAndWaitFailover(t, master, replica)
	c.faults.Delay(0, nil) // the replica hears every buyer forgotten
	pending := buyers - decided.Load()
	<-done
	if pending == 0 {
		t.Fatal("every buyer had its answer when the replica took over: not mid-burst")
	}
	counts := map[string]int{}
	for user, err := range final {
		switch {
		case err == nil:
			counts["bought"]++
		case errors.Is(err, inventory.ErrSoldOut):
			counts["sold out"]++
		case errors.Is(err, inventory.ErrAlreadyPurchased):
			counts["already purchased"]++
		default:
			t.Errorf("%s ended undecided: %v", user, err)
		}
	}
	t.Logf("killed the master %s of bucket %d; %d buyers still to decide once its replica took over; answers %v; %d undecided answers retried",
		master.Addr, shardedBuckets-1, pending, counts, retried)
	if len(final) != buyers {
		t.Fatalf("%d of %d buyers have an answer", len(final), buyers)
	}
	checkAnswers(t, ctx, c.db, c.id, told, final)
	// More buyers than units, each retrying until decided: every unit is
	// sold, none left reserved by a run whose reply was lost.
	if counts["bought"] != stock {
		t.Errorf("%d buyers bought, want the stock, %d", counts["bought"], stock)
	}
}
