package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
)

// Quiet copies: a registered copy that is not in play (reset or bought
// since the last run, or in violation at it) costs the run one cheap
// probe (redisstage.Probe: one MGET of its stock and generation, one per
// bucket for redis-sharded), not a full repair and audit. It is checked
// in full when the probe finds it missing (a lost copy, reloaded and
// logged), or holding another stock or generation than when this job
// last checked it in full and found it clean, with nothing in flight.
// Every reservation, queued order, give-back or reload changes one of
// them, and a copy with work in flight (Busy) is not remembered clean:
// so a crashed instance's reservation keeps its copy checked in full
// until it is settled. A change in the database alone (a cancellation,
// units owed back) marks the item as bought
// (inventory.Service.CancelUnpaid), so it is in play. The memory is the
// fleet's (cleanKey): a run on any instance skips a copy that another's
// found clean; a Redis that lost it has every copy checked in full once.

// A quiet copy's finding stays true, and the run vouches for it: it
// records its own time for the item (vouchedKey), which an audit shows as
// the finding's time, the full check's kept as CheckedAt, so that an
// audit after a burst shows a run after the burst. A quiet item whose
// finding is gone (expired) or was a violation is checked in full
// instead.

// Registrar is what a Repairer may also do: register a copy found
// unregistered (adopt).
type Registrar interface {
	Register(ctx context.Context, id int64) error
}

// adopt looks for copies of the items in play that registry r does not
// list: a first load registers its item, then writes the copy, and a
// Redis that restarted between the two has a copy nobody lists (its
// reservations would never be settled). A copy the probe finds is
// registered again and checked with the others; ids are the registry's
// items, to which it adds them.
func (j *Job) adopt(ctx context.Context, r Repairer, name string, inPlay, ids map[int64]bool, probes map[int64]redisstage.Probe) {
	reg, ok := r.(Registrar)
	if !ok {
		return
	}
	missing := map[int64]bool{}
	for id, in := range inPlay {
		if in && !ids[id] {
			missing[id] = true
		}
	}
	for id, p := range j.probeCopies(ctx, r, missing) {
		if p.Missing {
			continue
		}
		if err := reg.Register(ctx, id); err != nil {
			j.opts.Logger.Warn("registering a copy found unregistered failed; checking it this run", "registry", name, "id", id, "err", err)
		} else {
			j.opts.Logger.Warn("reconcile: found an unregistered Redis copy of an item in play (its registration was lost with a Redis restart); registered it", "registry", name, "id", id)
		}
		ids[id], probes[id] = true, p
		j.seen.union(name, []int64{id})
	}
}

// Prober is what a Repairer may also do: look at its copies cheaply.
type Prober interface {
	Probe(ctx context.Context, ids []int64) (map[int64]redisstage.Probe, error)
}

// cleanKey is the fleet's memory of the state in which the job last found
// each copy of a registry ("copy", "buckets") of kind clean, item id ->
// state: one hash, read with one HMGET per run. It lives in the Redis
// that holds the copies: a Redis that lost them lost it too, and every
// copy is then checked in full.
func cleanKey(prefix, kind, name string) string {
	return prefixOr(prefix) + "clean:" + kind + ":" + name
}

// loadClean reads the remembered states of copies ids; an error leaves
// them unknown (checked in full).
func (j *Job) loadClean(ctx context.Context, kind, name string, ids map[int64]bool) map[int64]string {
	out := map[int64]string{}
	if len(ids) == 0 {
		return out
	}
	fields, list := make([]string, 0, len(ids)), make([]int64, 0, len(ids))
	for id := range ids {
		fields, list = append(fields, strconv.FormatInt(id, 10)), append(list, id)
	}
	vs, err := j.rdb.HMGet(ctx, cleanKey(j.opts.Prefix, kind, name), fields...).Result()
	if err != nil {
		j.opts.Logger.Warn("reading which copies were found clean failed; checking them in full", "kind", kind, "err", err)
		return out
	}
	for i, v := range vs {
		if s, ok := v.(string); ok {
			out[list[i]] = s
		}
	}
	return out
}

// probeCopies probes the copies ids of registry r; nil when r cannot
// probe or the probe failed (every copy is then checked in full).
func (j *Job) probeCopies(ctx context.Context, r Repairer, ids map[int64]bool) map[int64]redisstage.Probe {
	p, ok := r.(Prober)
	if !ok || len(ids) == 0 {
		return nil
	}
	list := make([]int64, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	out, err := p.Probe(ctx, list)
	if err != nil {
		j.opts.Logger.Warn("probing the Redis copies failed; checking them in full", "err", err)
		return nil
	}
	return out
}

// quiet says whether item id, not in play, has only copies that probed
// as last found clean.
func quiet(w work, id int64) bool {
	for _, c := range w.registries() {
		if !c.has[id] {
			continue
		}
		p, ok := c.probes[id]
		s, known := c.clean[id]
		if !ok || p.Missing || !known || s != p.State {
			return false
		}
	}
	return true
}

// settle remembers, for the fleet, the probed state of item id's copies
// when its full check found it clean, and forgets it otherwise.
func (j *Job) settle(ctx context.Context, kind string, w work, id int64, r ItemResult) {
	ok := !bad(r) && r.Note == "" && quietDrift(r.Drift) && quietDrift(r.BucketDrift)
	field := strconv.FormatInt(id, 10)
	for _, c := range w.registries() {
		p, probed := c.probes[id]
		was, known := c.clean[id]
		key := cleanKey(j.opts.Prefix, kind, c.name)
		var err error
		switch {
		case ok && probed && c.has[id] && !p.Missing:
			if !known || was != p.State {
				err = j.rdb.HSet(ctx, key, field, p.State).Err()
			}
		case known:
			err = j.rdb.HDel(ctx, key, field).Err()
		}
		if err != nil {
			j.opts.Logger.Warn("recording whether a copy was found clean failed", "kind", kind, "id", id, "err", err)
		}
	}
}

// quietDrift says whether a repair found nothing to do (or did not run).
func quietDrift(d *redisstage.Drift) bool {
	return d == nil || !d.Busy && !d.Repaired && d.Resolved == 0
}

// vouch reads the findings of the quiet items of inPlay (those false in
// it), in one MGET (on a Cluster, one pipelined GET each), and returns
// the ids of those this run vouches for; an item whose finding is
// missing, unreadable or a violation is put in play instead (checked in
// full).
func (j *Job) vouch(ctx context.Context, kind string, inPlay map[int64]bool) []int64 {
	var ids []int64
	for id, ok := range inPlay {
		if !ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = findingKey(j.opts.Prefix, kind, id)
	}
	vals, err := getAll(ctx, j.rdb, keys)
	out := ids[:0]
	for i, id := range ids {
		var p published
		if err != nil || vals[i] == nil || json.Unmarshal(vals[i], &p) != nil || bad(p.Item) || p.Item.ID != id {
			inPlay[id] = true
			continue
		}
		out = append(out, id)
	}
	return out
}

// vouchedKey is the hash of the runs that vouched for kind's findings:
// item id -> "<unix nanos>|<instance>" of the newest such run. One HSET a
// run writes them all (publish), and an item's audit reads its field
// (LastFor).
func vouchedKey(prefix, kind string) string { return prefixOr(prefix) + "vouched:" + kind }

// getAll reads keys: in one MGET, or on a Cluster, where keys of several
// slots cannot share one, in one pipelined GET each. A missing key reads
// as nil.
func getAll(ctx context.Context, rdb redis.UniversalClient, keys []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	if _, cluster := rdb.(*redis.ClusterClient); !cluster {
		vs, err := rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, err
		}
		for i, v := range vs {
			if s, ok := v.(string); ok {
				out[i] = []byte(s)
			}
		}
		return out, nil
	}
	pipe := rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, g := range gets {
		if b, err := g.Bytes(); err == nil {
			out[i] = b
		}
	}
	return out, nil
}
