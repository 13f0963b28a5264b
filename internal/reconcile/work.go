package reconcile

import (
	"context"
	"slices"
	"strconv"
	"sync"

	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
)

// The job's work: which items one run checks. Not the catalogue: an item
// nobody has bought has no Redis copy and no orders, and nothing to repair
// or audit. A run checks, for each kind,
//   - the items with a Redis copy of a stage (each stage's registry of
//     copies, Repairer.Copies, which the stages write before they load a
//     copy), and the copies this instance saw registered at its earlier
//     runs: a Redis that lost its data lost the registry too, and those
//     copies are then lost copies, reloaded and logged as before;
//   - the items reset (MarkReset) or bought (Activity) since the last run,
//     which it drains;
//   - the items the previous run found in violation, until they are clean.
// Of the registered copies, those not in play this way cost one probe
// each, and are checked in full only when it finds something (quiet.go).

// work is one kind's items for one run, and which copies each has.
type work struct {
	items   []int64        // every item to repair and audit, in order
	copy    map[int64]bool // items with a redis-atomic copy to repair
	buckets map[int64]bool // items with redis-sharded buckets to repair
	// What this run's probe found of each registered copy (quiet.go).
	copyProbes, bucketProbes map[int64]redisstage.Probe
	// The states the fleet last found them clean in (quiet.go).
	copyClean, bucketClean map[int64]string
	// The quiet items whose findings this run vouches for (quiet.go).
	vouched []int64
}

// registry is one of an item's copies in a run's work.
type registry struct {
	name   string
	has    map[int64]bool
	probes map[int64]redisstage.Probe
	clean  map[int64]string
}

func (w work) registries() []registry {
	return []registry{{"copy", w.copy, w.copyProbes, w.copyClean}, {"buckets", w.buckets, w.bucketProbes, w.bucketClean}}
}

// seenCopies are the copies registered at this instance's earlier runs,
// by registry ("<kind>:copy", "<kind>:buckets").
type seenCopies struct {
	mu  sync.Mutex
	ids map[string]map[int64]bool
}

// union returns ids and the ids seen before under name, and remembers ids.
func (s *seenCopies) union(name string, ids []int64) map[int64]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.ids[name]
	if seen == nil {
		seen = map[int64]bool{}
		s.ids[name] = seen
	}
	for _, id := range ids {
		seen[id] = true
	}
	out := make(map[int64]bool, len(seen))
	for id := range seen {
		out[id] = true
	}
	return out
}

// work lists target t's items for this run; prev is the fleet's previous
// run, whose violations are checked again. A registered copy not in play
// is checked only if its probe finds something to do (quiet.go).
func (j *Job) work(ctx context.Context, t Target, prev Result) (work, error) {
	w := work{copy: map[int64]bool{}, buckets: map[int64]bool{}}
	for _, c := range []struct {
		name   string
		r      Repairer
		into   *map[int64]bool
		probes *map[int64]redisstage.Probe
		clean  *map[int64]string
	}{{"copy", t.Repairer, &w.copy, &w.copyProbes, &w.copyClean}, {"buckets", t.Buckets, &w.buckets, &w.bucketProbes, &w.bucketClean}} {
		if c.r == nil {
			continue
		}
		ids, err := c.r.Copies(ctx)
		if err != nil {
			return work{}, err
		}
		*c.into = j.seen.union(t.Kind+":"+c.name, ids)
		*c.probes = j.probeCopies(ctx, c.r, *c.into)
		*c.clean = j.loadClean(ctx, t.Kind, c.name, *c.into)
	}
	inPlay := map[int64]bool{}
	reset, err := j.drainActive(ctx, t.Kind)
	if err != nil {
		return work{}, err
	}
	for _, id := range reset {
		inPlay[id] = true
	}
	for _, r := range prev.Items {
		if r.Kind == t.Kind && r.ID != 0 {
			inPlay[r.ID] = true
		}
	}
	if t.Repairer != nil {
		if w.copyProbes == nil {
			w.copyProbes = map[int64]redisstage.Probe{}
		}
		j.adopt(ctx, t.Repairer, t.Kind+":copy", inPlay, w.copy, w.copyProbes)
	}
	if t.Buckets != nil {
		if w.bucketProbes == nil {
			w.bucketProbes = map[int64]redisstage.Probe{}
		}
		j.adopt(ctx, t.Buckets, t.Kind+":buckets", inPlay, w.buckets, w.bucketProbes)
	}
	for id := range w.copy {
		inPlay[id] = inPlay[id] || !quiet(w, id)
	}
	for id := range w.buckets {
		inPlay[id] = inPlay[id] || !quiet(w, id)
	}
	w.vouched = j.vouch(ctx, t.Kind, inPlay)
	for id, ok := range inPlay {
		if ok {
			w.items = append(w.items, id)
		}
	}
	slices.Sort(w.items)
	return w, nil
}

// drainActive takes the items reset or bought since the last run. Each is removed
// before it is checked, so a reset that comes after the removal is left
// for the next run, and one before it is covered by this one.
func (j *Job) drainActive(ctx context.Context, kind string) ([]int64, error) {
	key := activeKey(j.opts.Prefix, kind)
	ms, err := j.rdb.SMembers(ctx, key).Result()
	if err != nil || len(ms) == 0 {
		return nil, err
	}
	members := make([]any, len(ms))
	ids := make([]int64, 0, len(ms))
	for i, m := range ms {
		members[i] = m
		if id, err := strconv.ParseInt(m, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	if err := j.rdb.SRem(ctx, key, members...).Err(); err != nil {
		return nil, err
	}
	return ids, nil
}
