package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// SentinelGroup is Redis as production runs it, on this machine: a
// primary, one replica of it and three Sentinels (quorum 2) watching them,
// all redis-server processes the test started on free loopback ports.
type SentinelGroup struct {
	t testing.TB
	// Master is the name the Sentinels monitor the primary under.
	Master    string
	Primary   *RedisProcess
	Replica   *RedisProcess
	Sentinels []*RedisProcess
}

// SentinelDownAfter is how long the group's Sentinels wait for an
// unanswered primary before they call it down and fail over; a failover
// takes a few seconds more (agreement, election, promotion).
const SentinelDownAfter = time.Second

// StartSentinelGroup starts a primary and a replica that has synced with
// it, both with args (for example "--appendonly", "yes": the replica may
// become the primary), and three Sentinels that know both and each other,
// and stops them when the test ends. It skips the test when redis-server
// is not installed (fails under CI=true).
func StartSentinelGroup(t testing.TB, args ...string) *SentinelGroup {
	t.Helper()
	g := &SentinelGroup{t: t, Master: Name("seckill-")}
	g.Primary, g.Replica = StartReplicaPair(t, args...)
	primaryPort := g.Primary.port
	for i := 0; i < 3; i++ {
		s := startRedis(t, func(port int, dir string) []string {
			// Sentinel rewrites its config file, so each gets its own.
			conf := filepath.Join(dir, "sentinel.conf")
			body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
				"sentinel down-after-milliseconds %[1]s %[3]d\n"+
				// A failed election is tried again after twice this.
				"sentinel failover-timeout %[1]s 3000\n", g.Master, primaryPort, SentinelDownAfter.Milliseconds())
			if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{conf, "--sentinel"}
		}, func(int) []string { return nil })
		g.Sentinels = append(g.Sentinels, s)
	}
	// The sentinels find each other and the replica by hello messages, a
	// round every 2 s; the wait follows what each has found so far.
	known := func() string {
		var b strings.Builder
		for _, s := range g.Sentinels {
			c := g.client(s.Addr)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			others, err1 := c.Do(ctx, "SENTINEL", "SENTINELS", g.Master).Slice()
			replicas, err2 := c.Do(ctx, "SENTINEL", "REPLICAS", g.Master).Slice()
			cancel()
			_ = c.Close()
			fmt.Fprintf(&b, "sentinel %s: %d other sentinels (%v), %d replicas (%v)\n", s.Addr, len(others), err1, len(replicas), err2)
		}
		return b.String()
	}
	var state string
	testkit.WaitProgress(t, "every sentinel to know the replica and the two other sentinels", stall, func() string { state = known(); return state }, func() bool {
		return strings.Count(state, ": 2 other sentinels (<nil>), 1 replicas (<nil>)") == len(g.Sentinels)
	})
	return g
}

// stall is how long a wait of the group's lets its processes stand still
// before it fails: the waits follow progress (testkit.WaitProgress), so a
// machine whose cores are all taken slows them without failing them.
// Longer than a failed election's retry (twice the failover timeout, 6 s).
const stall = 30 * time.Second

// ReplicationState is what the replication of the server at addr is
// doing, for testkit.WaitProgress: its role and link, a sync's bytes and
// the offsets, which advance while it runs, and none of the values that
// move with the clock alone.
func ReplicationState(addr string) string {
	var b strings.Builder
	for _, line := range strings.Split(info(addr, "replication"), "\n") {
		line = strings.TrimSpace(line)
		switch k, _, _ := strings.Cut(line, ":"); k {
		case "role", "master_link_status", "master_sync_in_progress", "master_sync_total_bytes", "master_sync_read_bytes",
			"master_sync_left_bytes", "slave_read_repl_offset", "slave_repl_offset", "connected_slaves", "master_repl_offset":
			b.WriteString(line + "\n")
		}
	}
	if b.Len() == 0 {
		return "no answer from " + addr
	}
	return b.String()
}

// StartReplicaPair starts a primary and a replica of it, both with args,
// waits until the replica has synced, and stops both when the test ends.
func StartReplicaPair(t testing.TB, args ...string) (primary, replica *RedisProcess) {
	t.Helper()
	// The replica syncs at once, not after the default 5 s wait for more
	// replicas to share one transfer.
	primary = StartRedis(t, append([]string{"--repl-diskless-sync-delay", "0"}, args...)...)
	return primary, StartReplicaOf(t, primary, args...)
}

// StartReplicaOf starts a replica of primary with args, waits until it has
// synced, and stops it when the test ends. A primary started without
// "--repl-diskless-sync-delay 0" waits 5 s before it sends the data.
func StartReplicaOf(t testing.TB, primary *RedisProcess, args ...string) *RedisProcess {
	t.Helper()
	replica := startReplicaOf(t, primary, args...)
	WaitReplicaSynced(t, replica)
	return replica
}

// startReplicaOf is StartReplicaOf without the wait for the sync.
func startReplicaOf(t testing.TB, primary *RedisProcess, args ...string) *RedisProcess {
	t.Helper()
	return startRedis(t, nil, func(int) []string {
		return append([]string{"--replicaof", "127.0.0.1", fmt.Sprint(primary.port)}, args...)
	})
}

// WaitReplicaSynced waits until replica's link to its primary is up. A
// replica that never syncs fails the test with what its INFO says last,
// replication and the process that answers, so that the log tells a slow
// sync from a server that is not the one started.
func WaitReplicaSynced(t testing.TB, replica *RedisProcess) {
	t.Helper()
	waitReplicaSynced(t, replica, stall)
}

// waitReplicaSynced is WaitReplicaSynced that lets the sync stand still
// for still before it fails.
func waitReplicaSynced(t testing.TB, replica *RedisProcess, still time.Duration) {
	t.Helper()
	var last string
	if !testkit.PollProgress(still, func() string { return ReplicationState(replica.Addr) }, func() bool {
		last = info(replica.Addr, "replication")
		return strings.Contains(last, "master_link_status:up")
	}) {
		pid := -1
		if replica.cmd != nil && replica.cmd.Process != nil {
			pid = replica.cmd.Process.Pid
		}
		t.Fatalf("the replica on %s (process %d) did not sync with its primary, and its sync stood still for %v; INFO server and replication:\n%s\n%s",
			replica.Addr, pid, still, info(replica.Addr, "server"), last)
	}
}

// SentinelAddrs returns the Sentinels' addresses.
func (g *SentinelGroup) SentinelAddrs() []string {
	var out []string
	for _, s := range g.Sentinels {
		out = append(out, s.Addr)
	}
	return out
}

// HoldReplication stops the replica (SIGSTOP) and cuts its link at the
// primary, so that nothing written from now on reaches it: bytes already
// on the wire would still be read from the socket once the replica
// resumes, but the cut link carries none. WAIT on the primary finds no
// replica. ReleaseReplication lets the replica run again; while the
// primary lives it reconnects and catches up.
func (g *SentinelGroup) HoldReplication() {
	g.t.Helper()
	g.Replica.Pause()
	c := g.client(g.Primary.Addr)
	defer c.Close()
	if err := c.ClientKillByFilter(context.Background(), "TYPE", "replica").Err(); err != nil {
		g.t.Fatalf("cut the replica's link on the primary: %v", err)
	}
	testkit.WaitProgress(g.t, "the primary to have no replica connected", stall, func() string { return ReplicationState(g.Primary.Addr) }, func() bool {
		return strings.Contains(g.info(g.Primary.Addr, "replication"), "connected_slaves:0")
	})
}

// ReleaseReplication resumes the replica HoldReplication stopped.
func (g *SentinelGroup) ReleaseReplication() { g.Replica.Resume() }

// WaitFailover waits until every Sentinel names the replica as the primary
// and the replica says it is one, and returns its address. Kill the
// primary first.
func (g *SentinelGroup) WaitFailover() string {
	g.t.Helper()
	testkit.WaitProgress(g.t, "the sentinels to promote the replica", stall, g.failoverState, func() bool {
		for _, s := range g.Sentinels {
			c := g.client(s.Addr)
			addr, err := c.Do(context.Background(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.Master).StringSlice()
			_ = c.Close()
			if err != nil || len(addr) != 2 || addr[0]+":"+addr[1] != g.Replica.Addr {
				return false
			}
		}
		return strings.Contains(g.info(g.Replica.Addr, "replication"), "role:master")
	})
	return g.Replica.Addr
}

// failoverState is where a failover stands, as the sentinels and the
// replica say: each sentinel's view of the master (its address, flags
// such as s_down, o_down and failover_in_progress, its failover state
// and config epoch, which a new election moves on), and the replica's
// role.
func (g *SentinelGroup) failoverState() string {
	var b strings.Builder
	for _, s := range g.Sentinels {
		c := g.client(s.Addr)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		reply, err := c.Do(ctx, "SENTINEL", "MASTER", g.Master).Result()
		cancel()
		_ = c.Close()
		fmt.Fprintf(&b, "sentinel %s (%v):", s.Addr, err)
		// RESP3 answers a map, RESP2 a flat list of names and values.
		fields := map[string]any{}
		switch m := reply.(type) {
		case map[any]any:
			for k, v := range m {
				fields[fmt.Sprint(k)] = v
			}
		case []any:
			for i := 0; i+1 < len(m); i += 2 {
				fields[fmt.Sprint(m[i])] = m[i+1]
			}
		}
		for _, name := range []string{"ip", "port", "flags", "failover-state", "config-epoch", "num-slaves", "role-reported"} {
			if v, ok := fields[name]; ok {
				fmt.Fprintf(&b, " %s=%v", name, v)
			}
		}
		b.WriteByte('\n')
	}
	return b.String() + "replica " + ReplicationState(g.Replica.Addr)
}

// Rejoin restarts the primary WaitFailover replaced, empty, as a replica
// of the promoted one, waits until it has synced, and swaps the group's
// roles: Primary is the promoted server again, Replica the old primary.
// The sentinels find the new replica through the primary.
//
// Until it has synced, the old primary runs with replica-priority 0,
// which the Sentinels never promote: a primary they thought down for a
// moment (a starved machine, a fork for the sync) was failed over to the
// empty replica, which then lost the stock's Redis copy and never synced
// (chaos stress, TestEverySafeStageAcrossSentinelFailover). Then it gets
// the default priority back.
func (g *SentinelGroup) Rejoin() {
	g.t.Helper()
	g.rejoinStart()
	g.rejoinEnd()
}

// rejoinStart restarts the replaced primary, empty and unpromotable, as a
// replica of the promoted one.
func (g *SentinelGroup) rejoinStart() {
	g.t.Helper()
	_, port, _ := strings.Cut(g.Replica.Addr, ":")
	g.Primary.Restart("--replicaof", "127.0.0.1", port, "--replica-priority", "0")
}

// rejoinEnd waits until the restarted primary has synced, gives it the
// default priority back, and swaps the group's roles.
func (g *SentinelGroup) rejoinEnd() {
	g.t.Helper()
	old, promoted := g.Primary, g.Replica
	WaitReplicaSynced(g.t, old)
	c := g.client(old.Addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ConfigSet(ctx, "replica-priority", "100").Err(); err != nil {
		g.t.Fatalf("give the synced replica on %s its priority back: %v", old.Addr, err)
	}
	g.Primary, g.Replica = promoted, old
}

// client is a plain client of one of the group's processes.
func (g *SentinelGroup) client(addr string) *redis.Client { return plainClient(addr) }

func plainClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
}

func (g *SentinelGroup) info(addr, section string) string { return info(addr, section) }

// info returns a section of INFO from addr, "" when it does not answer.
func info(addr, section string) string {
	c := plainClient(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, _ := c.Info(ctx, section).Result()
	return s
}
