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
	stop chan struct{}
	done chan struct{}
}

// Tick is how often the embedded servers age their keys: a key expires at
// most this much after its TTL, never before, which is the safe side for a
// lock.
const Tick = 25 * time.Millisecond

// StartRedis starts a Redis server on addr ("127.0.0.1:0" picks a port).
// Key TTLs run on the wall clock, as on a real server. miniredis only ages
// keys when its clock is driven, so a goroutine drives it every Tick.
// (miniredis can also age keys on every command, but that walks every key
// each time, and a lab run leaves tens of thousands of them.)
func StartRedis(addr string) (*Redis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("start embedded redis on %s: %w", addr, err)
	}
	r := &Redis{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go r.drive()
	return r, nil
}

// drive ages the keys by the real time elapsed since the last tick.
func (r *Redis) drive() {
	defer close(r.done)
	t := time.NewTicker(Tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.m.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Addr is the host:port the server listens on.
func (r *Redis) Addr() string { return r.m.Addr() }

// Close stops the server and drops its data.
func (r *Redis) Close() {
	close(r.stop)
	<-r.done
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
