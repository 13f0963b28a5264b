// Package embedded provides the zero-set-up backends of `seckill demo`: Redis
// servers that run inside the process and speak RESP on loopback, with TTLs
// that expire in real time (the lock's watchdog and fencing depend on
// that), and the SQL database in a single file.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"

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
// never before their TTL has run, which the lock's validity deadline relies
// on. TTLs are aged before every command (miniredis's ClockTTL), so a key
// is never charged for time that passed before it was set. That walks
// every key on each command: use it for servers with few keys, such as
// locks and stock.
func StartRedis(addr string) (*Redis, error) {
	m, err := start(addr)
	if err != nil {
		return nil, err
	}
	m.ClockTTL(true)
	return &Redis{m: m}, nil
}

// StartRedisForRecords starts a server for many keys that live for seconds
// or more, such as Idempotency-Key records, where per-command ageing would
// be slow. A goroutine ages every key once a Tick by the time elapsed since
// the previous tick, but by at most one Tick: a key set between two ticks
// is charged for at most one Tick before it existed, so it never expires
// more than one Tick early. When the process is too busy to tick on time,
// keys expire late (never early), which is the safe side for a lease.
func StartRedisForRecords(addr string) (*Redis, error) {
	t := time.NewTicker(Tick)
	r, err := startRecords(addr, t.C)
	if err != nil {
		t.Stop()
		return nil, err
	}
	go func() { <-r.done; t.Stop() }()
	return r, nil
}

// startRecords is StartRedisForRecords ageing keys on ticks.
func startRecords(addr string, ticks <-chan time.Time) (*Redis, error) {
	m, err := start(addr)
	if err != nil {
		return nil, err
	}
	r := &Redis{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go r.drive(ticks, time.Now())
	return r, nil
}

func start(addr string) (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("start embedded redis on %s: %w", addr, err)
	}
	return m, nil
}

// drive ages the keys on every tick by the real time elapsed since the
// last one, capped at one Tick: a late tick must not charge a key just set
// for time before it existed.
func (r *Redis) drive(ticks <-chan time.Time, last time.Time) {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case now := <-ticks:
			r.m.FastForward(min(now.Sub(last), Tick))
			last = now
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
