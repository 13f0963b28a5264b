// Package embedded provides the zero-set-up backends of `seckill demo`: Redis
// servers that run inside the process and speak RESP on loopback, with TTLs
// that expire in real time (the lock's watchdog and fencing depend on
// that), and the SQL database in a single file.
package embedded

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"

	"github.com/seckill-lab/seckill/internal/store"
)

// Redis is an in-process Redis server on a loopback port.
type Redis struct {
	m    *miniredis.Miniredis
	stop chan struct{} // nil unless a goroutine ages the keys
	done chan struct{}
}

// Tick is how often a server from StartRedisForRecords ages its keys.
const Tick = 25 * time.Millisecond

// StartRedis starts a Redis server on addr ("127.0.0.1:0" picks a port)
// whose keys expire on time, against the wall clock, as on a real server:
// never before their TTL has run from the arrival of the command that set
// it, which the lock's validity deadline relies on. TTLs are aged before
// every command, and only the keys that have one (see ttlAger): a key
// without a TTL costs the other commands nothing.
//
// Time stands still while one command runs, as on Redis 7: a script or a
// MULTI block sees one clock from its first call to its last, so a key it
// has read cannot expire before its next call. (miniredis alone ages the
// keys on every call inside a script too: a lock script that read a held
// lock then found it gone, and the lock was granted twice.)
func StartRedis(addr string) (*Redis, error) {
	m, err := start(addr)
	if err != nil {
		return nil, err
	}
	if err := agePerCommand(m); err != nil {
		m.Close()
		return nil, err
	}
	return &Redis{m: m}, nil
}

// agePerCommand ages m's TTLs before each command a client sends, and
// leaves the clock alone for the calls a script makes.
func agePerCommand(m *miniredis.Miniredis) error {
	if err := canTellScriptCalls(m); err != nil {
		return err
	}
	if err := canAge(m); err != nil {
		return err
	}
	a := &ttlAger{m: m, base: time.Now()}
	m.SetTime(a.base)
	m.Server().SetPreHook(a.beforeCommand)
	return nil
}

// fromScript reports a call made by a Lua script.
func fromScript(p *server.Peer) bool {
	f, _ := scriptFlag(p)
	return f
}

// scriptFlag reads the flag miniredis sets in the connection state of a
// script's calls: it does not export that state, so the flag is read by
// reflection. ok is false when p has no such flag.
func scriptFlag(p *server.Peer) (flag, ok bool) {
	if p.Ctx == nil {
		return false, false
	}
	v := reflect.ValueOf(p.Ctx)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false, false
	}
	f := v.Elem().FieldByName("nested")
	if !f.IsValid() || f.Kind() != reflect.Bool {
		return false, false
	}
	return f.Bool(), true
}

// canTellScriptCalls makes sure scriptFlag can read the flag, on the state
// of a command dispatched by hand: without it, every script's first call
// would wait forever for the lock its own script holds.
func canTellScriptCalls(m *miniredis.Miniredis) error {
	p := server.NewPeer(bufio.NewWriter(io.Discard))
	m.Server().Dispatch(p, []string{"PING"})
	if _, ok := scriptFlag(p); !ok {
		return errors.New("embedded redis: this miniredis version no longer marks a script's calls where internal/embedded reads the mark; update scriptFlag")
	}
	return nil
}

// StartRedisForRecords starts a server for many keys that live for seconds
// or more, such as Idempotency-Key records, where per-command ageing would
// be slow. A goroutine ages every key once a Tick by the time elapsed since
// it last aged them, read when it takes the tick, but by at most one Tick:
// a key set between two ageings is charged for at most one Tick before it
// existed, so it never expires more than one Tick early. When the process
// is too busy to tick on time, keys expire late (never early), which is the
// safe side for a lease.
func StartRedisForRecords(addr string) (*Redis, error) {
	t := time.NewTicker(Tick)
	r, err := startRecords(addr, t.C, time.Now)
	if err != nil {
		t.Stop()
		return nil, err
	}
	go func() { <-r.done; t.Stop() }()
	return r, nil
}

// startRecords is StartRedisForRecords ageing keys on ticks, by the time
// now tells.
func startRecords(addr string, ticks <-chan time.Time, now func() time.Time) (*Redis, error) {
	m, err := start(addr)
	if err != nil {
		return nil, err
	}
	r := &Redis{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go r.drive(ticks, now, now())
	return r, nil
}

func start(addr string) (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("start embedded redis on %s: %w", addr, err)
	}
	return m, nil
}

// drive ages the keys on every tick by the time elapsed since it last aged
// them, capped at one Tick: a late tick must not charge a key just set for
// time before it existed. The time is read when the tick is taken, not
// the tick's own: a tick that waited in the channel was sent before keys
// set since, and the next tick's time would charge them for the wait once
// more (up to two Ticks early, seen under make stress).
func (r *Redis) drive(ticks <-chan time.Time, now func() time.Time, last time.Time) {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case <-ticks:
			t := now()
			r.m.FastForward(min(t.Sub(last), Tick))
			last = t
		}
	}
}

// Addr is the host:port the server listens on.
func (r *Redis) Addr() string { return r.m.Addr() }

// Close stops the server and drops its data.
func (r *Redis) Close() {
	if r.stop != nil {
		close(r.stop)
		<-r.done
	}
	r.m.Close()
}

// StartRedisN starts n servers; on error it stops those already started.
func StartRedisN(n int) ([]*Redis, error) {
	out := make([]*Redis, 0, n)
	for i := 0; i < n; i++ {
		r, err := StartRedis("127.0.0.1:0")
		if err != nil {
			for _, s := range out {
				s.Close()
			}
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// OpenSQL opens (creating if needed) the demo database file at path, with
// the schema and seed data applied.
func OpenSQL(ctx context.Context, path string) (*store.DB, error) {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	db, err := store.OpenSQLite(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := db.Migrate(ctx); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return db, nil
}
