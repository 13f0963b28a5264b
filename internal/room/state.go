package room

import (
	"context"
	_ "embed"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/admit.lua
var admitSource string

//go:embed scripts/restore.lua
var restoreSource string

var (
	admitScript   = redis.NewScript(admitSource)
	restoreScript = redis.NewScript(restoreSource)
)

// State is a room as Redis last told this instance.
type State struct {
	Epoch    int64 // 0: no room
	Admitted int64 // places up to this one are admitted
	Next     int64 // places given so far
	Drawn    int64 // early joiners (the draw's size); -1 before the draw
	Seed     int64
	Expired  int64 // places up to this one have been freed
	Spent    int64 // spent places above Expired
	SoldOut  bool
	Rate     int64
	Max      int64
	Shuffle  int64 // ms
	PassMS   int64
	OpensMS  int64
	NowMS    int64 // the room's clock when it was read
}

// Inside is the pass holders counted inside: admitted, neither spent nor
// expired.
func (s State) Inside() int64 { return max(0, s.Admitted-s.Expired-s.Spent) }

// view is one room on this instance: its last state, the admission steps
// it saw (for a pass's admission instant), its draw's permutation.
type view struct {
	mu      sync.Mutex
	st      State
	at      time.Time // local time when st was read (st.NowMS)
	newsAt  time.Time // the last news or step
	steps   []step
	perm    []int32
	permFor [2]int64 // drawn, seed
	used    time.Time
	ticking bool
	kick    chan struct{}
	// noneUntil remembers that the item has no room, until then.
	noneUntil time.Time
	// goneUpTo is the instant of the last removal of the item's room this
	// instance heard of: the rooms of epochs up to it are gone, and an
	// answer about one (a step Redis ran before the removal, learnt after
	// it) is not learnt.
	goneUpTo int64
}

// forget forgets the room, removed at the instant removed: the rooms of
// epochs up to it are gone. A room of a later epoch was set after that
// removal (this instance learnt it before the removal's news or answer
// came): it stays, and so do its epoch's news and steps. removed 0 is a
// removal of unknown instant (the news of an instance of the version
// before): the room held is gone.
func (v *view) forget(removed int64) {
	if removed > 0 && v.st.Epoch > removed {
		v.goneUpTo = max(v.goneUpTo, removed)
		return
	}
	v.goneUpTo = max(v.goneUpTo, removed, v.st.Epoch)
	v.st, v.steps, v.perm = State{}, nil, nil
}

// step is an admission step: places up to upTo admitted at ms.
type step struct{ upTo, ms int64 }

func (m *Manager) view(id int64) *view {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.rooms[id]
	if !ok {
		if len(m.rooms) >= m.sweepAt {
			m.dropIdle()
		}
		v = &view{kick: make(chan struct{}, 1), used: time.Now()}
		m.rooms[id] = v
	}
	return v
}

// dropIdle forgets the items nobody asked about for Idle whose room does
// not step here (most are items without a room, asked about by their
// buys), so that memory follows the items in use, not the catalogue. It
// runs when the map has doubled since the last sweep (m.mu held).
func (m *Manager) dropIdle() {
	for id, v := range m.rooms {
		v.mu.Lock()
		idle := !v.ticking && time.Since(v.used) > m.opts.Idle
		v.mu.Unlock()
		if idle {
			delete(m.rooms, id)
		}
	}
	m.sweepAt = max(minSweep, 2*len(m.rooms))
}

// minSweep is the fewest items a Manager keeps before it sweeps.
const minSweep = 256

// nowMS estimates the room's clock now from the last reading.
func (v *view) nowMS() int64 {
	if v.at.IsZero() {
		return time.Now().UnixMilli()
	}
	return v.st.NowMS + time.Since(v.at).Milliseconds()
}

// learn takes a state newer than (or as new as) the one held.
func (v *view) learn(st State, at time.Time) {
	if st.Epoch <= v.goneUpTo || st.Epoch < v.st.Epoch || st.Epoch == v.st.Epoch && st.NowMS < v.st.NowMS {
		return
	}
	if st.Epoch != v.st.Epoch {
		v.steps, v.perm = nil, nil
	}
	if n := len(v.steps); st.Admitted > 0 && (n == 0 || st.Admitted > v.steps[n-1].upTo) {
		v.steps = append(v.steps, step{upTo: st.Admitted, ms: st.NowMS})
	}
	for len(v.steps) > 1 && v.steps[0].ms+st.PassMS < st.NowMS {
		v.steps = v.steps[1:]
	}
	v.st, v.at, v.newsAt, v.noneUntil = st, at, time.Now(), time.Time{}
}

// admittedAt is when place p was admitted, on the room's clock, as far as
// this instance saw it: the first step it saw that admitted it, else the
// last reading (later than the truth, so a pass never outlives the room's
// own count of its place; Redis decides at the spend).
func (v *view) admittedAt(p int64) int64 {
	for _, s := range v.steps {
		if s.upTo >= p {
			return s.ms
		}
	}
	return v.st.NowMS
}

// place is the place a ticket holds: an early joiner's arrival number
// through the draw's permutation, anyone else's as given. ok is false
// before the draw.
func (v *view) place(t Token) (int64, bool) {
	if !t.Early {
		return t.Place, true
	}
	if v.st.Drawn < 0 {
		return 0, false
	}
	if t.Place > v.st.Drawn {
		return t.Place, true // joined as the draw closed elsewhere
	}
	if v.permFor != [2]int64{v.st.Drawn, v.st.Seed} || v.perm == nil {
		v.perm, v.permFor = permutation(int(v.st.Drawn), uint64(v.st.Seed)), [2]int64{v.st.Drawn, v.st.Seed}
	}
	return int64(v.perm[t.Place-1]), true
}

// permutation is the draw: places 1..n shuffled by seed, the same on every
// instance (Fisher-Yates over splitmix64).
func permutation(n int, seed uint64) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i + 1)
	}
	x := seed
	for i := n - 1; i > 0; i-- {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		j := int(z % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// state returns the room's state for a request, from memory while it is
// fresh, else from one admission step (the fallback read); it keeps the
// room's step running while the room is in use. ErrNoRoom when the item
// has none.
func (m *Manager) state(ctx context.Context, id int64) (*view, State, error) {
	m.subscribe()
	v := m.view(id)
	v.mu.Lock()
	v.used = time.Now()
	fresh := v.st.Epoch > 0 && time.Since(v.newsAt) < m.opts.Stale
	none := time.Now().Before(v.noneUntil)
	st := v.st
	v.mu.Unlock()
	if none {
		return v, State{}, ErrNoRoom
	}
	if !fresh {
		var err error
		if st, err = m.step(ctx, id, v, "-1"); err != nil {
			return v, State{}, err
		}
	}
	m.startTicking(id, v)
	return v, st, nil
}

// step runs one admission step of the room and learns its state. A room
// gone from Redis is restored from this instance's memory of it, if any.
func (m *Manager) step(ctx context.Context, id int64, v *view, soldOut string) (State, error) {
	st, _, err := m.stepAsking(ctx, id, v, soldOut, "-")
	return st, err
}

// stepAsking is step, asking the instances that hear its news to
// acknowledge it under ack when the room is sold out; asked is how many
// were asked (-1: none).
func (m *Manager) stepAsking(ctx context.Context, id int64, v *view, soldOut, ack string) (st State, asked int64, err error) {
	res, err := admitScript.Run(ctx, m.opts.RDB, m.keys(id), soldOut, seed(), NewsChannel, m.newsName(id), ack).Int64Slice()
	if err != nil {
		return State{}, -1, unavailable(err)
	}
	if m.afterStep != nil {
		m.afterStep()
	}
	if res[0] < 0 {
		if m.removed(v, res) {
			return State{}, -1, ErrNoRoom
		}
		st, err := m.restore(ctx, id, v)
		return st, -1, err
	}
	st, err = m.learnStep(v, res)
	return st, res[17], err
}

// removed tells whether an admission step's answer of no room is a
// removal's tombstone, and if so forgets the room: it was removed, not
// lost with Redis's data, and must not be restored.
func (m *Manager) removed(v *view, res []int64) bool {
	if len(res) < 2 || res[1] <= 0 {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.forget(res[1])
	if v.st.Epoch == 0 {
		v.noneUntil = time.Now().Add(time.Second)
	}
	return true
}

// learnStep learns an admission step's answer and counts what it did.
// ErrNoRoom when the room it answers about was removed meanwhile: Redis
// ran the step before the removal, and this instance heard of the
// removal before the step's answer.
func (m *Manager) learnStep(v *view, res []int64) (State, error) {
	st := State{Epoch: res[1], Admitted: res[2], Next: res[3], Drawn: res[4], Seed: res[5], SoldOut: res[6] == 1, NowMS: res[7],
		Expired: res[8], Spent: res[9], Max: res[10], Rate: res[11], Shuffle: res[12], PassMS: res[13], OpensMS: res[14]}
	m.passes.Add(res[15])
	m.expiries.Add(res[16])
	v.mu.Lock()
	defer v.mu.Unlock()
	if st.Epoch <= v.goneUpTo {
		return State{}, ErrNoRoom
	}
	v.learn(st, time.Now())
	return v.st, nil
}

// restore re-creates a room Redis lost from this instance's memory of
// it, then steps it; with no memory, the item has no room.
func (m *Manager) restore(ctx context.Context, id int64, v *view) (State, error) {
	v.mu.Lock()
	st := v.st
	if st.Epoch == 0 {
		v.noneUntil = time.Now().Add(time.Second)
		v.mu.Unlock()
		return State{}, ErrNoRoom
	}
	v.mu.Unlock()
	so := 0
	if st.SoldOut {
		so = 1
	}
	done, err := restoreScript.Run(ctx, m.opts.RDB, m.keys(id)[:2], st.Epoch, st.Rate, st.Max, st.Shuffle, st.PassMS, st.OpensMS,
		st.Next, st.Drawn, st.Seed, st.Admitted, st.Expired, so).Int64()
	if err != nil {
		return State{}, unavailable(err)
	}
	if done == 1 {
		m.opts.Log.Warn("restored a waiting room Redis lost, from this instance's memory", "item", id, "epoch", st.Epoch, "next", st.Next, "admitted", st.Admitted)
	}
	res, err := admitScript.Run(ctx, m.opts.RDB, m.keys(id), "-1", seed(), NewsChannel, m.newsName(id), "-").Int64Slice()
	if err != nil {
		return State{}, unavailable(err)
	}
	if res[0] < 0 {
		m.removed(v, res)
		return State{}, ErrNoRoom
	}
	return m.learnStep(v, res)
}

// subscribe starts the news subscription once.
func (m *Manager) subscribe() {
	m.subOnce.Do(func() {
		ps := m.opts.RDB.Subscribe(m.ctx, NewsChannel, AckChannel)
		// Wait (a little) for the subscription to be confirmed, so that
		// news sent after the first request is heard.
		ctx, cancel := context.WithTimeout(m.ctx, time.Second)
		if _, err := ps.Receive(ctx); err != nil {
			m.opts.Log.Debug("the waiting rooms' news subscription is not confirmed yet", "err", err)
		}
		cancel()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer ps.Close()
			ch := ps.Channel()
			for {
				select {
				case <-m.ctx.Done():
					return
				case msg, ok := <-ch:
					if !ok {
						return
					}
					if msg.Channel == AckChannel {
						m.acks.heard(msg.Payload)
						continue
					}
					if m.beforeNews != nil {
						m.beforeNews()
					}
					if ack := m.hear(msg.Payload); ack != "" {
						m.acknowledge(ack)
					}
				}
			}
		}()
	})
}

// hear takes one piece of news: "kind:id epoch admitted next drawn seed
// sold_out now_ms expired [ack]"; epoch 0 says the room was removed. It
// returns the id to acknowledge the news under ("" for none), once the
// news is learnt.
func (m *Manager) hear(payload string) (ack string) {
	f := strings.Fields(payload)
	if len(f) == 10 {
		if f[9] != "-" {
			ack = f[9]
		}
		f = f[:9]
	}
	if len(f) != 9 {
		return ""
	}
	name, idText, ok := strings.Cut(f[0], ":")
	id, err := strconv.ParseInt(idText, 10, 64)
	if !ok || err != nil || name != m.opts.Namespace {
		return
	}
	var n [8]int64
	for i := range n {
		if n[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return
		}
	}
	m.mu.Lock()
	v, known := m.rooms[id]
	m.mu.Unlock()
	if !known {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if n[0] == 0 {
		// The removal's instant rides in the news's now_ms.
		v.forget(n[6])
		v.noneUntil = time.Time{}
		return
	}
	if n[0] <= v.goneUpTo {
		return
	}
	if n[0] != v.st.Epoch {
		// A new room: its settings are not in the news; the next request
		// reads them, even where the item was known to have none.
		v.newsAt, v.noneUntil = time.Time{}, time.Time{}
		return
	}
	st := v.st
	st.Admitted, st.Next, st.Drawn, st.Seed, st.SoldOut, st.NowMS, st.Expired = n[1], n[2], n[3], n[4], n[5] == 1, n[6], n[7]
	v.learn(st, time.Now())
	return ack
}
