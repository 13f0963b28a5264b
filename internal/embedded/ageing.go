package embedded

import (
	"errors"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// ttlAger ages the TTLs of a StartRedis server before every command a
// client sends, and visits only the keys that have a TTL.
//
// miniredis's own ClockTTL ages on every access, exactly, but walks every
// key of the server, sorted, each time: a GET took 20 µs on an empty
// server, 337 µs beside 1,000 keys without a TTL and 169 ms beside
// 100,000, so each item's stock copy and stream made every command of the
// demo dearer. The keys without a TTL (stock, streams, buyers) need no
// ageing; locks, claims and rate windows are few.
//
// Each ageing runs under the server's lock and charges the time since the
// one before: a key whose TTL was set since is charged from then, which is
// no earlier than the arrival of the command that set it (that command's
// own ageing came first). So a key never expires before its TTL has run
// from the moment its command reached the server. Keys whose TTL ran out
// are deleted by miniredis (FastForward(0)) before the command runs; a
// command of another client that runs in between still finds them, which
// is the late side, as on a loaded Redis. Hash fields' own TTLs (HEXPIRE)
// are not aged: nothing in seckill sets one.
type ttlAger struct {
	m    *miniredis.Miniredis
	base time.Time // with its monotonic reading
	mu   sync.Mutex
	last time.Duration // since base, when the TTLs were last aged
}

// beforeCommand is the server's pre-hook: it sets the server's clock (for
// TIME and EXPIREAT) and ages the TTLs, except for the calls a script makes,
// which see the clock their script started with.
func (a *ttlAger) beforeCommand(p *server.Peer, _ string, _ ...string) bool {
	if fromScript(p) {
		// The script's command holds the server's lock: ageing here would
		// wait for it forever, and must not move the clock anyway.
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Since(a.base)
	a.m.SetTime(a.base.Add(now))
	elapsed := now - a.last
	a.last = now
	if elapsed > 0 && a.age(elapsed) > 0 {
		a.m.FastForward(0) // deletes the keys whose TTL ran out
	}
	return false // go on with the command
}

// age takes elapsed off every TTL, under the server's lock, and returns
// how many ran out.
func (a *ttlAger) age(elapsed time.Duration) (ranOut int) {
	a.m.Lock()
	defer a.m.Unlock()
	for _, ttl := range ttlMaps(a.m) {
		for k, d := range ttl {
			d -= elapsed
			ttl[k] = d
			if d <= 0 {
				ranOut++
			}
		}
	}
	return ranOut
}

// ttlMaps are the TTL maps of the server's databases (RedisDB.ttl), which
// miniredis does not export: read by reflection, written in place. Call
// with the server's lock held; canAge checks at start that they are there.
func ttlMaps(m *miniredis.Miniredis) []map[string]time.Duration {
	dbs := reflect.ValueOf(m).Elem().FieldByName("dbs")
	out := make([]map[string]time.Duration, 0, dbs.Len())
	for it := dbs.MapRange(); it.Next(); {
		f := it.Value().Elem().FieldByName("ttl")
		out = append(out, *(*map[string]time.Duration)(unsafe.Pointer(f.UnsafeAddr())))
	}
	return out
}

// canAge makes sure ttlMaps finds what it reads: without it, TTLs would
// never run out.
func canAge(m *miniredis.Miniredis) error {
	dbs := reflect.ValueOf(m).Elem().FieldByName("dbs")
	ttl, ok := reflect.TypeOf(miniredis.RedisDB{}).FieldByName("ttl")
	if !dbs.IsValid() || dbs.Type() != reflect.TypeOf(map[int]*miniredis.RedisDB{}) ||
		!ok || ttl.Type != reflect.TypeOf(map[string]time.Duration{}) {
		return errors.New("embedded redis: this miniredis version no longer keeps its TTLs where internal/embedded ages them; update ttlMaps")
	}
	return nil
}
