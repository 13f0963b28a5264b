package room

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

var testKeys = "k1:0123456789abcdef0123"

// newManager is a Manager on rdb over a namespace of its own, closed at
// cleanup.
func newManager(t *testing.T, rdb redis.UniversalClient, ns string) *Manager {
	t.Helper()
	m := New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: ns, Step: 10 * time.Millisecond})
	t.Cleanup(m.Close)
	return m
}

// setRoom sets a room for item 1 and waits until m has read it.
func setRoom(t *testing.T, m *Manager, s Settings) {
	t.Helper()
	if _, err := m.Set(context.Background(), 1, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.opts.RDB.Del(context.Background(), m.keys(1)...).Err() })
}

// pollUntil polls ticket until its state is want, and returns that status.
func pollUntil(t *testing.T, m *Manager, buyer, ticket, want string) Status {
	t.Helper()
	var st Status
	testkit.Eventually(t, "state "+want, 20*time.Second, func() bool {
		var err error
		st, err = m.Poll(context.Background(), 1, buyer, ticket)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		return st.State == want
	})
	return st
}

func join(t *testing.T, m *Manager, buyer string) (string, Status) {
	t.Helper()
	tok, _, st, err := m.Join(context.Background(), 1, buyer)
	if err != nil {
		t.Fatalf("join %s: %v", buyer, err)
	}
	return tok, st
}

// Places follow arrival after the opening span; admission never lets more
// than MaxInside pass holders in at once, and a spent pass frees a place.
func TestRoomAdmitsInOrderUpToMaxInside(t *testing.T) {
	m := newManager(t, testenv.Redis(t), testenv.Name("rt"))
	setRoom(t, m, Settings{Rate: 100000, MaxInside: 2})
	var tickets []string
	for i, b := range []string{"a", "b", "c"} {
		tok, st := join(t, m, b)
		if st.Place != int64(i+1) {
			t.Fatalf("%s got place %d, want %d", b, st.Place, i+1)
		}
		tickets = append(tickets, tok)
	}
	pa := pollUntil(t, m, "a", tickets[0], StateAdmitted)
	pollUntil(t, m, "b", tickets[1], StateAdmitted)
	// Two inside: c waits however long it polls, until one of them spends.
	for range 5 {
		m.Kick(1)
		if st, err := m.Poll(context.Background(), 1, "c", tickets[2]); err != nil || st.State != StateWaiting || st.Position != 1 {
			t.Fatalf("c, with two pass holders inside: %+v, %v", st, err)
		}
	}
	if _, err := m.Spend(context.Background(), 1, "a", pa.Pass, "key-a"); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, m, "c", tickets[2], StateAdmitted)
	// The poll may hear of c's admission by the room's news before the
	// step that admitted it has counted it.
	testkit.Eventually(t, "3 passes counted", 10*time.Second, func() bool { return m.Counts().Passes == 3 })
	if c := m.Counts(); c.Joins != 3 || c.Spends != 1 || c.Passes != 3 {
		t.Fatalf("counts %+v, want 3 joins, 3 passes, 1 spend", c)
	}
}

// A pass works once; its second use names the key of the first, so that
// a retry with that key can hear the first answer. A pass given back (the
// buy did not run) works again.
func TestPassSpentOnce(t *testing.T) {
	m := newManager(t, testenv.Redis(t), testenv.Name("rt"))
	setRoom(t, m, Settings{Rate: 100000, MaxInside: 10})
	tok, _ := join(t, m, "a")
	pass := pollUntil(t, m, "a", tok, StateAdmitted).Pass
	ctx := context.Background()
	spent, err := m.Spend(ctx, 1, "a", pass, "k1")
	if err != nil {
		t.Fatal(err)
	}
	var se *SpentError
	if _, err := m.Spend(ctx, 1, "a", pass, "k2"); !errors.As(err, &se) || se.Key != "k1" {
		t.Fatalf("second spend: %v, want a SpentError naming k1", err)
	}
	if err := m.Unspend(ctx, spent); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Spend(ctx, 1, "a", pass, "k2"); err != nil {
		t.Fatalf("spend after the pass was given back: %v", err)
	}
}

// Tickets and passes for another item or buyer, of another kind, forged,
// or of a room replaced since are refused, each with its error.
func TestTokensRefused(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	m := newManager(t, rdb, ns)
	setRoom(t, m, Settings{Rate: 100000, MaxInside: 10})
	if _, err := m.Set(context.Background(), 2, Settings{Rate: 1, MaxInside: 1}); err != nil {
		t.Fatal(err)
	}
	tok, _ := join(t, m, "a")
	pass := pollUntil(t, m, "a", tok, StateAdmitted).Pass
	forger := New(Options{RDB: rdb, Signer: signer(t, "k1:not-the-fleet-secret!"), Namespace: ns})
	t.Cleanup(forger.Close)
	forged, _ := join(t, forger, "a")
	ctx := context.Background()
	for name, c := range map[string]struct {
		call func() error
		want error
	}{
		"ticket, other buyer": {func() error { _, err := m.Poll(ctx, 1, "b", tok); return err }, ErrWrongBuyer},
		"ticket, other item":  {func() error { _, err := m.Poll(ctx, 2, "a", tok); return err }, ErrWrongItem},
		"ticket forged":       {func() error { _, err := m.Poll(ctx, 1, "a", forged); return err }, ErrForged},
		"pass as ticket":      {func() error { _, err := m.Poll(ctx, 1, "a", pass); return err }, ErrMalformed},
		"ticket as pass":      {func() error { _, err := m.Spend(ctx, 1, "a", tok, ""); return err }, ErrMalformed},
		"pass, other buyer":   {func() error { _, err := m.Spend(ctx, 1, "b", pass, ""); return err }, ErrWrongBuyer},
		"pass, other item":    {func() error { _, err := m.Spend(ctx, 2, "a", pass, ""); return err }, ErrWrongItem},
		"pass forged":         {func() error { _, err := m.Spend(ctx, 1, "a", pass[:len(pass)-2]+"AA", ""); return err }, ErrForged},
	} {
		t.Run(name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	// A room set again is a new room: what the old one gave is expired.
	setRoom(t, m, Settings{Rate: 100000, MaxInside: 10})
	if _, err := m.Poll(ctx, 1, "a", tok); !errors.Is(err, ErrExpired) {
		t.Fatalf("ticket of a replaced room: %v, want ErrExpired", err)
	}
	if _, err := m.Spend(ctx, 1, "a", pass, ""); !errors.Is(err, ErrExpired) {
		t.Fatalf("pass of a replaced room: %v, want ErrExpired", err)
	}
}

// A pass not spent within its validity is refused, and its place is
// freed for the next in line.
func TestPassExpires(t *testing.T) {
	m := newManager(t, testenv.Redis(t), testenv.Name("rt"))
	setRoom(t, m, Settings{Rate: 100000, MaxInside: 1, PassTTL: time.Second})
	ta, _ := join(t, m, "a")
	tb, _ := join(t, m, "b")
	pass := pollUntil(t, m, "a", ta, StateAdmitted).Pass
	if st, err := m.Poll(context.Background(), 1, "b", tb); err != nil || st.State != StateWaiting {
		t.Fatalf("b while a holds the only pass: %+v, %v", st, err)
	}
	pollUntil(t, m, "b", tb, StateAdmitted) // a's pass ran out
	if _, err := m.Spend(context.Background(), 1, "a", pass, ""); !errors.Is(err, ErrExpired) {
		t.Fatalf("spending an expired pass: %v, want ErrExpired", err)
	}
	if _, err := m.Poll(context.Background(), 1, "a", ta); !errors.Is(err, ErrExpired) {
		t.Fatalf("polling a ticket whose turn passed: %v, want ErrExpired", err)
	}
	testkit.Eventually(t, "the expiry counted", 10*time.Second, func() bool { return m.Counts().Expiries >= 1 })
	if c := m.Counts(); c.Expiries != 1 {
		t.Fatalf("expiries %d, want 1", c.Expiries)
	}
}

// Buyers who join during the opening span get their places by a draw:
// the places are 1..n, in an order that is not the arrival order, and
// every instance computes the same.
func TestOpeningShuffle(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	m, other := newManager(t, rdb, ns), newManager(t, rdb, ns)
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1, Shuffle: 10 * time.Minute, OpensAt: time.Now().Add(-time.Second)})
	const n = 20
	tickets := make([]string, n)
	for i := range tickets {
		var st Status
		tickets[i], st = join(t, m, "b"+string(rune('a'+i)))
		if st.State != StateDrawing {
			t.Fatalf("joined in the opening span: %+v", st)
		}
	}
	// Close the draw now (the test cannot wait out the span).
	if err := rdb.HSet(context.Background(), m.keys(1)[0], "opens_ms", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m.Kick(1)
	seen, inOrder := map[int64]bool{}, 0
	for i, tok := range tickets {
		st := pollUntil(t, m, "b"+string(rune('a'+i)), tok, StateWaiting)
		st2 := pollUntil(t, other, "b"+string(rune('a'+i)), tok, StateWaiting)
		if st.Place != st2.Place || st.Place < 1 || st.Place > n || seen[st.Place] {
			t.Fatalf("ticket %d: place %d here, %d on another instance", i, st.Place, st2.Place)
		}
		seen[st.Place] = true
		if st.Place == int64(i+1) {
			inOrder++
		}
	}
	if inOrder == n {
		t.Fatal("the draw kept the arrival order")
	}
	late, st := join(t, m, "late")
	if st.Place != n+1 {
		t.Fatalf("a join after the draw got place %d, want %d", st.Place, n+1)
	}
	_ = late
}

// An instance that restarts loses no place: another Manager on the same
// Redis serves the tickets the first gave, at the same places.
func TestInstanceRestartKeepsPlaces(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	first := New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: ns})
	if _, err := first.Set(context.Background(), 1, Settings{Rate: 1, MaxInside: 1}); err != nil {
		t.Fatal(err)
	}
	var tickets []string
	for _, b := range []string{"a", "b", "c"} {
		tok, _ := join(t, first, b)
		tickets = append(tickets, tok)
	}
	first.Close()
	second := newManager(t, rdb, ns)
	for i, b := range []string{"a", "b", "c"} {
		st, err := second.Poll(context.Background(), 1, b, tickets[i])
		if err != nil || st.Place != int64(i+1) {
			t.Fatalf("%s after the restart: %+v, %v", b, st, err)
		}
	}
	if _, st := join(t, second, "d"); st.Place != 4 {
		t.Fatalf("a join after the restart got place %d, want 4", st.Place)
	}
}

// A Redis restart that loses the room (no persistence): an instance that
// knew it restores it from memory, and every ticket keeps its place.
func TestRedisRestartRestoresTheRoom(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 2})
	t.Cleanup(func() { _ = rdb.Close() })
	m := newManager(t, rdb, "product")
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1})
	var tickets []string
	for _, b := range []string{"a", "b", "c"} {
		tok, _ := join(t, m, b)
		tickets = append(tickets, tok)
	}
	srv.Restart()
	v := m.view(1)
	v.mu.Lock()
	v.newsAt = time.Time{} // the next poll reads Redis
	v.mu.Unlock()
	for i, b := range []string{"a", "b", "c"} {
		var st Status
		testkit.Eventually(t, "a poll after the restart", 10*time.Second, func() bool {
			var err error
			st, err = m.Poll(context.Background(), 1, b, tickets[i])
			return err == nil
		})
		if st.Place != int64(i+1) {
			t.Fatalf("%s after the restart: place %d, want %d", b, st.Place, i+1)
		}
	}
	if n, err := rdb.HGet(context.Background(), m.keys(1)[0], "next").Int64(); err != nil || n != 3 {
		t.Fatalf("restored room's next place: %d, %v; want 3", n, err)
	}
	if _, st := join(t, m, "d"); st.Place != 4 {
		t.Fatalf("a join after the restart got place %d, want 4", st.Place)
	}
}

// The room on Redis Cluster: its keys share the item's slot, its scripts
// run there, and its news reaches an instance whose connection is on
// another node.
func TestRoomOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := testenv.StartRedisCluster(t)
	cluster := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	m, other := newManager(t, cluster(), "product"), newManager(t, cluster(), "product")
	setRoom(t, m, Settings{Rate: 100000, MaxInside: 1})
	ta, _ := join(t, m, "a")
	tb, _ := join(t, other, "b")
	pass := pollUntil(t, other, "a", ta, StateAdmitted).Pass
	if _, err := m.Spend(context.Background(), 1, "a", pass, "k"); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, m, "b", tb, StateAdmitted)
}

// While Redis is down, an item this instance knows no room of has none
// (its buys go on, on the stages that need no Redis), and one it knows a
// room of answers the error (its buys wait for the room).
func TestHasWhileRedisIsDown(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	m := New(Options{RDB: rdb, Signer: signer(t, testKeys), Stale: time.Nanosecond})
	t.Cleanup(m.Close)
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1})
	srv.Kill()
	ctx := context.Background()
	if has, err := m.Has(ctx, 2); has || err != nil {
		t.Fatalf("an item without a room, Redis down: %v, %v; want false, nil", has, err)
	}
	if has, err := m.Has(ctx, 1); has || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("an item with a room, Redis down: %v, %v; want ErrUnavailable", has, err)
	}
}

// commandCount counts the commands a client sends.
type commandCount struct{ n atomic.Int64 }

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// A poll costs no Redis round trip while the room's state is fresh: it is
// answered from the ticket and the instance's memory.
func TestPollIsAnsweredFromMemory(t *testing.T) {
	rdb := redis.NewClient(testenv.Redis(t).Options())
	t.Cleanup(func() { _ = rdb.Close() })
	count := &commandCount{}
	rdb.AddHook(count)
	// Steps an hour apart, fresh for an hour: only the requests' own
	// round trips are counted.
	m := New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: testenv.Name("rt"), Step: time.Hour, Stale: time.Hour})
	t.Cleanup(m.Close)
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1})
	tok, _ := join(t, m, "a")
	before := count.n.Load()
	for range 100 {
		if st, err := m.Poll(context.Background(), 1, "a", tok); err != nil || st.State != StateWaiting {
			t.Fatalf("poll: %+v, %v", st, err)
		}
	}
	if n := count.n.Load() - before; n != 0 {
		t.Fatalf("100 polls sent %d Redis commands, want 0", n)
	}
}

// stockSwitch is an item's stock as the test sets it.
type stockSwitch struct{ n atomic.Int64 }

func (s *stockSwitch) read(context.Context, int64) (int, error) { return int(s.n.Load()), nil }

// Once no unit remains, every waiting buyer's next poll answers sold-out
// and nobody is admitted; when units come back, the room admits again.
func TestSoldOutAndUnitsComingBack(t *testing.T) {
	stock := &stockSwitch{}
	stock.n.Store(1)
	m := New(Options{RDB: testenv.Redis(t), Signer: signer(t, testKeys), Namespace: testenv.Name("rt"), Step: 10 * time.Millisecond, Stock: stock.read})
	t.Cleanup(m.Close)
	setRoom(t, m, Settings{Rate: 100000, MaxInside: 1})
	ta, _ := join(t, m, "a")
	tb, _ := join(t, m, "b")
	pollUntil(t, m, "a", ta, StateAdmitted)
	stock.n.Store(0) // a's unit sold, say
	pollUntil(t, m, "b", tb, StateSoldOut)
	if st, err := m.Poll(context.Background(), 1, "a", ta); err != nil || st.State != StateSoldOut {
		t.Fatalf("an admitted buyer after the sell-out: %+v, %v", st, err)
	}
	stock.n.Store(1) // a payment timed out: a unit is back
	pollUntil(t, m, "b", tb, StateWaiting)
	if look, err := m.Get(context.Background(), 1); err != nil || look.SoldOut || look.Admitted != 1 {
		t.Fatalf("the room once a unit came back: %+v, %v", look, err)
	}
}

// A room set through one instance is known at once on another that had
// just found the item without one: the news of the new room ends that
// memory, so no buy gets through without a pass for a second.
func TestNewRoomEndsAnotherInstancesNoRoomMemory(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	m, other := newManager(t, rdb, ns), newManager(t, rdb, ns)
	ctx := context.Background()
	if has, err := other.Has(ctx, 1); has || err != nil {
		t.Fatalf("before the room: %v, %v", has, err)
	}
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1})
	// The news alone (no request on the other instance meanwhile) ends
	// its memory of no room.
	v := other.view(1)
	testkit.Eventually(t, "the news of the room to end the other instance's memory of none", 10*time.Second, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.noneUntil.IsZero()
	})
	if has, err := other.Has(ctx, 1); !has || err != nil {
		t.Fatalf("after the news: %v, %v", has, err)
	}
}

// A crowd joining through several instances at once gets places 1..n,
// each once; admission steps run by every instance at once, over and
// over, never let more than MaxInside pass holders in.
func TestInstancesAtOnceNeverOverAdmit(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	const instances, buyers, maxInside = 4, 40, 3
	ms := make([]*Manager, instances)
	for i := range ms {
		ms[i] = newManager(t, rdb, ns)
	}
	setRoom(t, ms[0], Settings{Rate: 100000, MaxInside: maxInside})
	ctx := context.Background()
	bar := testkit.NewBarrier(buyers, 30*time.Second)
	places := make(chan int64, buyers)
	errs := make(chan error, buyers)
	for b := range buyers {
		go func() {
			bar.Wait(ctx)
			_, _, st, err := ms[b%instances].Join(ctx, 1, "b"+strconv.Itoa(b))
			errs <- err
			places <- st.Place
		}()
	}
	seen := map[int64]bool{}
	for range buyers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		p := <-places
		if p < 1 || p > buyers || seen[p] {
			t.Fatalf("place %d given twice or out of 1..%d", p, buyers)
		}
		seen[p] = true
	}
	steps := testkit.NewBarrier(instances, 30*time.Second)
	done := make(chan error, instances)
	for _, m := range ms {
		go func() {
			v := m.view(1)
			var err error
			for range 20 {
				steps.Wait(ctx)
				if _, e := m.step(ctx, 1, v, "-1"); e != nil && err == nil {
					err = e
				}
			}
			done <- err
		}()
	}
	for range instances {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	look, err := ms[0].Get(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if look.Admitted != maxInside || look.Inside() != maxInside {
		t.Fatalf("after 80 steps at once: %d admitted, %d inside; want %d of each", look.Admitted, look.Inside(), maxInside)
	}
}

// A room removed through one instance is not brought back by another
// that still remembers it (it stepped before the news of the removal
// came, or missed it): the removal leaves a tombstone that restoring
// respects.
func TestRemovedRoomIsNotRestored(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	m, other := newManager(t, rdb, ns), newManager(t, rdb, ns)
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1})
	ctx := context.Background()
	v, st, err := other.state(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, 1); err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	v.st = st // the other instance's memory, as before the news came
	v.mu.Unlock()
	if _, err := other.step(ctx, 1, v, "-1"); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("a step of a removed room: %v, want ErrNoRoom", err)
	}
	if has, err := m.Has(ctx, 1); has || err != nil {
		t.Fatalf("the room after the other instance's step: %v, %v; want removed", has, err)
	}
	if _, err := other.Get(ctx, 1); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("the other instance, asked after its step found the tombstone: %v; want ErrNoRoom, not its memory", err)
	}
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1})
	if has, err := m.Has(ctx, 1); !has || err != nil {
		t.Fatalf("the room set again after its removal: %v, %v", has, err)
	}
}

// A step that ran in Redis before a removal, whose answer is learnt after
// the news of the removal, does not bring the room back into memory: the
// step's answer is held until the removal was heard. Before, the
// instance learnt the removed room again from it, answered it from
// memory, and stepped it (restoring it, in vain, every interval) until
// its state went stale: the lab's GET after removing its room said 200.
func TestStepAnsweredAfterTheRemovalIsNotLearnt(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	m := New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: ns, Step: time.Hour, Stale: time.Hour})
	t.Cleanup(m.Close)
	other := New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: ns, Step: time.Hour, Stale: time.Hour, AckWait: time.Minute})
	t.Cleanup(other.Close)
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1})
	ctx := context.Background()
	v, _, err := other.state(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	stepped, release := make(chan struct{}), make(chan struct{})
	other.afterStep = func() {
		close(stepped)
		<-release
	}
	done := make(chan error, 1)
	go func() {
		_, err := other.step(ctx, 1, v, "-1")
		done <- err
	}()
	<-stepped
	other.afterStep = nil
	if err := m.Remove(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the other instance heard the removal", 20*time.Second, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.st.Epoch == 0
	})
	close(release)
	if err := <-done; !errors.Is(err, ErrNoRoom) {
		t.Errorf("the step answered before the removal, learnt after it: %v; want ErrNoRoom", err)
	}
	if _, err := other.Get(ctx, 1); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("the other instance after the removal: %v; want ErrNoRoom", err)
	}
}

// removalPair is two instances of one namespace, with a room for item 1:
// m waits up to a minute for acknowledgements, and other answers from its
// memory for an hour; neither steps on its own.
func removalPair(t *testing.T) (m, other *Manager) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	m = New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: ns, Step: time.Hour, AckWait: time.Minute})
	t.Cleanup(m.Close)
	other = New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: ns, Step: time.Hour, Stale: time.Hour})
	t.Cleanup(other.Close)
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1})
	return m, other
}

// removeWithNewsHeld starts m's removal of item 1 while other's news is
// held until open is called; awaiting is closed when the removal waits
// for acknowledgements, and done gets its answer.
func removeWithNewsHeld(m, other *Manager) (open func(), awaiting <-chan struct{}, done <-chan error) {
	release, waits, answer := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	other.beforeNews = func() { <-release }
	m.awaiting = func() { close(waits) }
	go func() { answer <- m.Remove(context.Background(), 1) }()
	return func() { once.Do(func() { close(release) }) }, waits, answer
}

// A removal's answer waits until every instance has heard it: a buyer
// who asks another instance right after the admin was told the room is
// gone is not told to wait in it. The other instance's news is held until
// the removal waits for acknowledgements (on the code before, Remove
// returned without waiting, and the other instance answered from memory).
func TestRemovalWaitsUntilTheFleetHeardIt(t *testing.T) {
	m, other := removalPair(t)
	ctx := context.Background()
	if _, err := other.Get(ctx, 1); err != nil {
		t.Fatal(err)
	}
	open, awaiting, done := removeWithNewsHeld(m, other)
	t.Cleanup(open)
	select {
	case err := <-done:
		t.Fatalf("Remove returned (%v) while the other instance had not heard the removal", err)
	case <-awaiting:
	}
	open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := other.Get(ctx, 1); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("the other instance right after the removal's answer: %v; want ErrNoRoom", err)
	}
}

// An instance forgets the items nobody asked about lately whose room does
// not step there (most have no room, and were asked about by their buys):
// its memory follows the items in use, not the catalogue.
func TestIdleItemsAreForgotten(t *testing.T) {
	m := New(Options{RDB: testenv.Redis(t), Signer: signer(t, testKeys), Namespace: testenv.Name("rt"), Idle: time.Nanosecond})
	t.Cleanup(m.Close)
	ctx := context.Background()
	for id := int64(1); id <= 3*minSweep; id++ {
		if has, err := m.Has(ctx, id); has || err != nil {
			t.Fatalf("item %d: %v, %v", id, has, err)
		}
	}
	m.mu.Lock()
	n := len(m.rooms)
	m.mu.Unlock()
	if n > minSweep {
		t.Fatalf("%d items remembered after %d asked about once each, want at most %d", n, 3*minSweep, minSweep)
	}
}

// The last sale's answer waits until every instance has heard the sell-out:
// a waiting buyer who polls another instance right after it hears
// sold-out, though polls are answered from memory. The other instance's
// news is held until the sale's Settle waits for acknowledgements (on the
// code before acknowledgements it never does, and the poll, answered from
// the other's memory, said waiting).
func TestLastSaleWaitsUntilTheFleetHeardTheSellOut(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	stock := &stockSwitch{}
	stock.n.Store(1)
	seller := New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: ns, Step: time.Hour, Stock: stock.read, AckWait: time.Minute})
	t.Cleanup(seller.Close)
	other := New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: ns, Step: time.Hour, AckWait: time.Minute})
	t.Cleanup(other.Close)
	setRoom(t, seller, Settings{Rate: 1, MaxInside: 1})
	tb, _ := join(t, other, "b")
	if st, err := other.Poll(context.Background(), 1, "b", tb); err != nil || st.State != StateWaiting && st.State != StateDrawing {
		t.Fatalf("b before the sale: %+v, %v", st, err)
	}
	if err := seller.Settle(context.Background(), 1); err != nil { // the seller knows the room
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	other.beforeNews = func() { <-release }
	seller.awaiting = open
	stock.n.Store(0) // the last unit sold
	if err := seller.Settle(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	st, err := other.Poll(context.Background(), 1, "b", tb)
	if err != nil || st.State != StateSoldOut {
		t.Fatalf("b polling the other instance right after the last sale's answer: %+v, %v; want sold-out", st, err)
	}
}

// The draw's seed is sent exactly: another instance, which learns the
// room only from its news here, learns the draw and its seed. Before, a
// 52-bit seed went through Lua's 14-digit number-to-text conversion in
// the news ("3.4870482497232e+15"), and every instance hearing it dropped
// it: after a draw no news of the room was learnt anywhere but where it
// was stepped (the sell-out included).
func TestDrawSeedSurvivesTheNews(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	m := newManager(t, rdb, ns)
	other := New(Options{RDB: rdb, Signer: signer(t, testKeys), Namespace: ns, Step: time.Hour, Stale: time.Hour})
	t.Cleanup(other.Close)
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1, Shuffle: 10 * time.Minute, OpensAt: time.Now().Add(-time.Second)})
	join(t, other, "early") // other knows the room, and hears its news
	ctx := context.Background()
	if err := rdb.HSet(ctx, m.keys(1)[0], "opens_ms", 0).Err(); err != nil {
		t.Fatal(err)
	}
	drew, err := m.step(ctx, 1, m.view(1), "-1")
	if err != nil || drew.Drawn < 0 {
		t.Fatalf("the draw: %+v, %v", drew, err)
	}
	v := other.view(1)
	testkit.Eventually(t, "the other instance to learn the draw from its news", 10*time.Second, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.st.Drawn == drew.Drawn && v.st.Seed == drew.Seed
	})
}

// A removal heard late does not take away a room set after it: an
// instance that already learnt the new room (its step ran after the new
// Set) and then hears the older removal's news keeps the new room. Before,
// forgetting raised goneUpTo to the epoch held, the new room's, so the
// instance answered ErrNoRoom for a room that exists, and ignored its news.
func TestLateRemovalNewsKeepsTheRoomSetAfterIt(t *testing.T) {
	m, other := removalPair(t)
	ctx := context.Background()
	v, _, err := other.state(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	open, awaiting, done := removeWithNewsHeld(m, other)
	t.Cleanup(open)
	<-awaiting // removed in Redis; the other instance's news is held
	set, err := m.Set(ctx, 1, Settings{Rate: 1, MaxInside: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The other instance steps the new room before the removal's news.
	if st, err := other.step(ctx, 1, v, "-1"); err != nil || st.Epoch != set.Epoch {
		t.Fatalf("the other instance's step of the new room: %+v, %v; want epoch %d", st, err, set.Epoch)
	}
	open()
	if err := <-done; err != nil { // the other instance acknowledged the removal
		t.Fatal(err)
	}
	if st, err := other.Get(ctx, 1); err != nil || st.Epoch != set.Epoch {
		t.Fatalf("the other instance after the older removal's news: %+v, %v; want the new room, epoch %d", st.State, err, set.Epoch)
	}
}

// The news of a removal by an instance of the version before (no instant:
// "0 0 0 0 0 0 0 0") still makes an instance forget the room it holds.
func TestRemovalNewsWithoutInstantForgetsTheRoom(t *testing.T) {
	rdb := testenv.Redis(t)
	ns := testenv.Name("rt")
	m := newManager(t, rdb, ns)
	setRoom(t, m, Settings{Rate: 1, MaxInside: 1})
	v, _, err := m.state(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Publish(context.Background(), NewsChannel, m.newsName(1)+" 0 0 0 0 0 0 0 0").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the room forgotten", 20*time.Second, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.st.Epoch == 0
	})
}
