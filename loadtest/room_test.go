package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// fakeRoom is a waiting room in front of a fake shop's product 1, as
// room-api.md describes it, with faults to break one rule of the
// waiting-room scenario at a time: it gives places, shuffles the
// opening's, admits by a rate from the end of the span, says sold-out
// once the shop's stock is gone, and ignores passes on the buy (the
// lab's rules are about the crowd the room lets through).
type fakeRoom struct {
	shop *fakeShop
	// Faults, each of which breaks its rule whatever the machine's
	// load: flood admits every ticket once the draw closes (no rate, no
	// cap); every503 answers every so many polls 503; reversed tells
	// every ticket the mirror of its place, admitting by the true one;
	// deaf never says sold-out; scalpersFirst admits the scalpers'
	// addresses as soon as the draw closes; stopAt stops admitting after
	// so many places.
	flood         bool
	every503      int
	reversed      bool
	deaf          bool
	scalpersFirst bool
	stopAt        int

	mu       sync.Mutex
	set      api.RoomSettings
	opens    time.Time // the opening plus the span: the draw
	joins    []fakeJoin
	drawn    bool
	places   []int // early joiner i's place after the draw
	admitted []int // the order the room admits tickets in (joins' indices)
	polls    int
	// n is how many of admitted are admitted, as of last: n grows at
	// the rate from the draw, up to max inside more than the units sold
	// (the fake's passes are spent by buys, and never expire).
	n    int
	last time.Time
	// admittedAt[k] is when the k-th admission came, and expired counts
	// the admissions (in order) whose holders let their pass run out.
	admittedAt []time.Time
	expired    int
}

type fakeJoin struct {
	at      time.Time
	user    string
	scalper bool
}

// fakePassTTL is how long the fake's pass holders have to buy: then their
// place is free again, as a real pass expires. A join whose answer the
// lab never read (its client gave up) leaves a holder who never buys.
const fakePassTTL = 5 * time.Second

// routes adds the room's routes to the shop's.
func (fr *fakeRoom) routes(mux *http.ServeMux) {
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("PUT /api/v1/admin/products/1/room", func(w http.ResponseWriter, r *http.Request) {
		var set api.RoomSettings
		if err := json.NewDecoder(r.Body).Decode(&set); err != nil || set.OpensAt == nil {
			reply(w, 400, map[string]string{"type": "/problems/invalid-request"})
			return
		}
		fr.mu.Lock()
		fr.set, fr.opens = set, set.OpensAt.Add(time.Duration(set.ShuffleMS)*time.Millisecond)
		fr.joins, fr.drawn, fr.places, fr.admitted, fr.polls, fr.n, fr.admittedAt, fr.expired = nil, false, nil, nil, 0, 0, nil, 0
		fr.mu.Unlock()
		reply(w, 200, api.Room{ProductID: 1, Epoch: 1, PassesPerSecond: int64(set.PassesPerSecond), OpensAt: *set.OpensAt})
	})
	mux.HandleFunc("DELETE /api/v1/admin/products/1/room", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, 200, api.RoomRemoved{ProductID: 1})
	})
	mux.HandleFunc("POST /api/v1/products/1/room/join", func(w http.ResponseWriter, r *http.Request) {
		fr.mu.Lock()
		now := time.Now()
		var b api.RoomJoin
		_ = json.NewDecoder(r.Body).Decode(&b)
		fr.joins = append(fr.joins, fakeJoin{at: now, user: b.UserID, scalper: strings.Contains(r.Header.Get("X-Forwarded-For"), "::2:")})
		i := len(fr.joins) - 1
		st := fr.status(i, now)
		fr.mu.Unlock()
		reply(w, 201, api.RoomTicket{Ticket: strconv.Itoa(i), RoomStatus: st})
	})
	mux.HandleFunc("POST /api/v1/products/1/room/poll", func(w http.ResponseWriter, r *http.Request) {
		var b api.RoomPoll
		_ = json.NewDecoder(r.Body).Decode(&b)
		i, _ := strconv.Atoi(b.Ticket)
		fr.mu.Lock()
		fr.polls++
		if fr.every503 > 0 && fr.polls%fr.every503 == 0 {
			fr.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			reply(w, 503, map[string]any{"type": "/problems/overloaded", "status": 503})
			return
		}
		st := fr.status(i, time.Now())
		fr.mu.Unlock()
		reply(w, 200, st)
	})
}

// status is what ticket i hears at now.
func (fr *fakeRoom) status(i int, now time.Time) api.RoomStatus {
	if now.Before(fr.opens) {
		return api.RoomStatus{State: "drawing", PollAfterMS: 50}
	}
	fr.draw(now)
	place := i
	if i < len(fr.places) {
		place = fr.places[i]
	}
	fr.shop.mu.Lock()
	soldOut, sold := fr.shop.initial > 0 && fr.shop.stock == 0, fr.shop.sold
	for k := fr.expired; k < fr.n && k < len(fr.admitted) && now.Sub(fr.admittedAt[k]) > fakePassTTL; k++ {
		if !fr.shop.orders[fr.joins[fr.admitted[k]].user] {
			fr.expired++ // a holder who never bought: its place is free
		}
	}
	fr.shop.mu.Unlock()
	if soldOut && !fr.deaf {
		return api.RoomStatus{State: "sold-out", Place: int64(place), PollAfterMS: 1000}
	}
	n := fr.admit(now, sold)
	if fr.reversed {
		place = 1_000_000 - place
	}
	if slices.Contains(fr.admitted[:min(n, len(fr.admitted))], i) || fr.scalpersFirst && fr.joins[i].scalper || fr.flood {
		return api.RoomStatus{State: "admitted", Place: int64(place), NowAdmitting: int64(n), Pass: "pass-" + strconv.Itoa(i), PollAfterMS: 20}
	}
	pos := slices.Index(fr.admitted, i) - n + 1
	if pos <= 0 { // joined after the order was drawn up: at the back
		pos = len(fr.joins) - n
	}
	wait := time.Duration(pos) * time.Second / time.Duration(fr.set.PassesPerSecond)
	return api.RoomStatus{State: "waiting", Place: int64(place), Position: int64(pos), NowAdmitting: int64(n),
		EstimatedWaitMS: wait.Milliseconds(), PollAfterMS: min(max(50, wait.Milliseconds()/10), 500)}
}

// admit steps the admission to now, as the room's admit.lua does: credit
// from the time since the last step at the rate, capped at
// max inside more than the units sold (and at stopAt), the clock of a
// capped step starting again from now.
func (fr *fakeRoom) admit(now time.Time, sold int) int {
	rate := float64(fr.set.PassesPerSecond)
	limit := sold + fr.expired + fr.set.MaxInside
	if fr.stopAt > 0 {
		limit = min(limit, fr.stopAt)
	}
	if credit := int(now.Sub(fr.last).Seconds() * rate); credit > 0 && fr.n < limit {
		next := min(fr.n+credit, limit)
		if next == limit {
			fr.last = now
		} else {
			fr.last = fr.last.Add(time.Duration(float64(next-fr.n) / rate * float64(time.Second)))
		}
		for len(fr.admittedAt) < next {
			fr.admittedAt = append(fr.admittedAt, now)
		}
		fr.n = next
	} else if fr.n >= limit {
		fr.last = now
	}
	return fr.n
}

// draw closes the opening's draw once: the early joiners' places by a
// shuffle, and the order of admission by those places (or by another
// shuffle, as a fault says). Later joiners are
// admitted in the order they joined.
func (fr *fakeRoom) draw(now time.Time) {
	if fr.drawn {
		// A late joiner joins the order at its back.
		for len(fr.admitted) < len(fr.joins) {
			fr.admitted = append(fr.admitted, len(fr.admitted))
		}
		return
	}
	fr.drawn, fr.last = true, now
	n := len(fr.joins)
	fr.places = rand.Perm(n)
	fr.admitted = make([]int, n)
	for i, p := range fr.places {
		fr.admitted[p] = i
	}
}

// roomArgs are the waiting-room scenario's small numbers: 30 units sold
// at 5 passes/s to 60 people (3 scalpers with 10 accounts each), one
// pass holder inside at a time, the opening 4 s ahead (the room is set
// before it even beside the stress suite's hogs) with a 300 ms span. With
// more inside, the last units go to whichever pass holders buy first,
// and a starved lab's buyers reorder them. The buy rate is taken over
// the whole sale: beside the stress suite's hogs the lab's own buyers
// bunch up over shorter windows, and a sale of six seconds leaves the
// sound room a margin over the lab's delays.
var roomArgs = []string{"--scenarios", "waiting-room", "--stages", "redis-atomic", "--stock", "30",
	"--room-people", "60", "--room-scalpers", "3", "--room-rate", "5", "--room-max-inside", "1", "--room-lead", "4s", "--room-shuffle", "300ms",
	"--room-rate-window", "1m", "--room-give-up", "1m", "--timeout", "30s"}

// TestRoomScenarioAgainstFakeRooms runs the waiting-room scenario against
// a fake room that is sound, then against one fault at a time, and checks
// that the sound room passes and each fault fails the row naming its
// rule.
func TestRoomScenarioAgainstFakeRooms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault func(*fakeRoom)
		rule  string // "" for a pass
	}{
		{"sound", func(*fakeRoom) {}, ""},
		{"admits every ticket at once", func(fr *fakeRoom) { fr.flood = true }, verdict.RuleRoomRate},
		{"answers polls 503", func(fr *fakeRoom) { fr.every503 = 10 }, verdict.RuleRoomNo503},
		{"tells places in reverse of its order", func(fr *fakeRoom) { fr.reversed = true }, verdict.RuleRoomFirstCome},
		{"never says sold-out", func(fr *fakeRoom) { fr.deaf = true }, verdict.RuleRoomSoldOut},
		{"admits the scalpers first", func(fr *fakeRoom) { fr.scalpersFirst = true }, verdict.RuleRoomScalpers},
		{"stops admitting with units left", func(fr *fakeRoom) { fr.stopAt = 15 }, verdict.RuleRoomExact},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fr := &fakeRoom{}
			tt.fault(fr)
			url, shop := startFakeShopAs(t, (*fakeShop).sell, true, func(s *fakeShop) { s.routes = fr.routes })
			fr.shop = shop
			env := map[string]string{"SECKILL_ADMIN_TOKEN": "fake-token", "NO_COLOR": "1"}
			args := roomArgs
			if fr.stopAt > 0 {
				args = append(slices.Clone(roomArgs), "--room-give-up", "10s") // it never sells out: its buyers wait this long
			}
			rep, err := runShortEnv(t, env, []string{url}, args...)
			r, ok := findRow(rep, "waiting-room", "redis-atomic")
			if !ok || r.Room == nil {
				t.Fatalf("no waiting-room row with its figures: %+v", rep.Rows)
			}
			if tt.rule == "" {
				if err != nil || r.Verdict != results.Pass {
					t.Fatalf("want a pass, got %v: %s %v %q", err, r.Verdict, r.Broken, r.Note)
				}
				assertSoundRoom(t, r)
				assertFile(t, filepath.Join(rep.dir, "report.md"), "waiting room · the crowd through the room, rule by rule")
				assertFile(t, filepath.Join(rep.dir, "report.md"), fmt.Sprintf("| %d/%d |", r.Room.Heard, r.Room.Waiting))
				return
			}
			if r.Verdict != results.Fail || !slices.Contains(r.Broken, tt.rule) || !strings.Contains(r.Note, tt.rule+":") {
				t.Fatalf("want a failed verdict naming %s, got %v: %s %v %q", tt.rule, err, r.Verdict, r.Broken, r.Note)
			}
		})
	}
}

// assertSoundRoom checks the figures of a sound room's row: every
// account joined, the stock sold, every waiting buyer heard sold-out
// with its delay measured, and a gain measured.
func assertSoundRoom(t *testing.T, r results.Row) {
	t.Helper()
	m := r.Room
	if m.Tickets != 57+30 || r.Sold != 30 || m.Won != 30 || m.Buys < 30 {
		t.Errorf("%d tickets, %d sold, %d won, %d buys: want 87 tickets and 30 sold", m.Tickets, r.Sold, m.Won, m.Buys)
	}
	if m.Waiting == 0 || m.Heard != m.Waiting || m.SoldOutP99ms <= 0 || m.SoldOutP99ms > m.SoldOutMaxMs {
		t.Errorf("sold-out: %d waiting, %d heard, p99 %.1f ms, max %.1f ms", m.Waiting, m.Heard, m.SoldOutP99ms, m.SoldOutMaxMs)
	}
	// Late pairs are measured when the machine answers a join within
	// the late joiners' pace; beside hogs they may all overlap.
	if m.Gain == nil || m.FirstCome == nil || m.RateRatio <= 0 {
		t.Errorf("gain %v, first-come %v, rate ratio %.2f: want all measured", m.Gain, m.FirstCome, m.RateRatio)
	}
}

// TestLabWaitingRoom runs the waiting-room scenario against the demo's
// real rooms: the lab sets the room through the admin route, the crowd
// joins, polls and buys through the three instances, and the row passes
// every rule that does not read the clock, with its figures measured; the
// room is gone afterwards. The buy rate's peak (room-rate, over a 2 s
// window of wall time) and the scalpers' gain on a 40-unit sale are the
// lab's to judge on a quiet machine: on a busy one the admitted buyers'
// buys bunch up behind a stalled core (1.12x the admission rate over 2 s,
// seen in a CI run beside another), so here they are measured, not judged.
func TestLabWaitingRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("builds seckill and runs the lab against its instances; left out of -short")
	}
	demo := startDemo(t)
	rep, err := runShort(t, demo, demo.instances, "--scenarios", "waiting-room", "--stages", "redis-atomic", "--stock", "40",
		"--room-people", "150", "--room-scalpers", "3", "--room-rate", "20", "--room-rate-window", "2s")
	r, ok := findRow(rep, "waiting-room", "redis-atomic")
	if !ok || r.Room == nil {
		t.Fatalf("waiting-room/redis-atomic: no row with its figures (%v)", err)
	}
	for _, rule := range r.Broken {
		if rule != verdict.RuleRoomRate && rule != verdict.RuleRoomScalpers {
			t.Fatalf("waiting-room/redis-atomic: %s, broken %v %q; want every rule that does not read the clock kept", r.Verdict, r.Broken, r.Note)
		}
	}
	if err != nil {
		t.Logf("the row broke only clock-read rules (%v), measured here, judged by the lab: %v", r.Broken, err)
	}
	m := r.Room
	if r.Sold != 40 || m.Tickets != 147+30 || m.Heard != m.Waiting || m.Waiting == 0 || m.Gain == nil || m.FirstCome == nil {
		t.Errorf("room figures %+v: want 40 sold, 177 tickets, every waiting buyer heard", m)
	}
	resp, err := http.Get(demo.instances[0] + "/api/v1/products/1/room")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET room after the row: %d, want 404 (the lab removes its room)", resp.StatusCode)
	}
}
