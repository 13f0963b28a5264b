package reconcile

import (
	"context"
	"sync"

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
// (inventory.Service.CancelUnpaid), so it is in play. A job with no
// memory of a copy (another instance's, or one just started) checks it
// in full once.

// Prober is what a Repairer may also do: look at its copies cheaply.
type Prober interface {
	Probe(ctx context.Context, ids []int64) (map[int64]redisstage.Probe, error)
}

// checkedCopies are the states in which this job last found each copy
// clean, by registry ("<kind>:copy", "<kind>:buckets") and item.
type checkedCopies struct {
	mu    sync.Mutex
	state map[string]map[int64]string
}

// clean says whether copy id of registry name is as it was last found clean.
func (c *checkedCopies) clean(name string, id int64, p redisstage.Probe) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.state[name][id]
	return ok && s == p.State && !p.Missing
}

// remember records the state a full check found clean; forget drops it,
// so that the copy is checked in full at the next run.
func (c *checkedCopies) remember(name string, id int64, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == nil {
		c.state = map[string]map[int64]string{}
	}
	if c.state[name] == nil {
		c.state[name] = map[int64]string{}
	}
	c.state[name][id] = state
}

func (c *checkedCopies) forget(name string, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.state[name], id)
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
func (j *Job) quiet(kind string, w work, id int64) bool {
	for _, c := range w.registries() {
		if !c.has[id] {
			continue
		}
		p, ok := c.probes[id]
		if !ok || !j.checked.clean(kind+":"+c.name, id, p) {
			return false
		}
	}
	return true
}

// settle remembers the probed state of item id's copies when its full
// check found it clean, and forgets it otherwise.
func (j *Job) settle(kind string, w work, id int64, r ItemResult) {
	ok := !bad(r) && r.Note == "" && quietDrift(r.Drift) && quietDrift(r.BucketDrift)
	for _, c := range w.registries() {
		p, probed := c.probes[id]
		if ok && probed && c.has[id] && !p.Missing {
			j.checked.remember(kind+":"+c.name, id, p.State)
		} else {
			j.checked.forget(kind+":"+c.name, id)
		}
	}
}

// quietDrift says whether a repair found nothing to do (or did not run).
func quietDrift(d *redisstage.Drift) bool {
	return d == nil || !d.Busy && !d.Repaired && d.Resolved == 0
}
