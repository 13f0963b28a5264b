// Package reconcile is the fleet's periodic bookkeeping: every interval,
// exactly one instance checks that the products and coupon batches that
// have work conserve their stock (initial = stock + sold), repairs the
// Redis copy that the redis-atomic stage keeps and the buckets of
// redis-sharded, and publishes what it found, item by item, for the audit
// endpoints. An item has work when it has a Redis copy, was reset or
// bought since the last run, or was found in violation by it (work.go):
// the cost of a run follows the items in play, never the catalogue.
//
// "Exactly one instance" is the scheduled-job dedupe that distributed locks
// are often used for. Time is cut into slots of one interval; an instance
// that wakes in a slot takes the reconcile lock, and inside it claims the
// slot unless that slot or a later one was claimed (claim_slot.lua). The
// lock keeps two runs from overlapping; the claim keeps a second instance
// from running the same slot after the first released the lock, however
// late it comes.
package reconcile

import (
	"context"
	_ "embed" // claim_slot.lua
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/lock"
)

// Auditor is what the job reads: an inventory.Service has it.
type Auditor interface {
	Audit(ctx context.Context, id int64) (inventory.Audit, error)
}

// Repairer fixes a stage's own copy of the stock (redisstage.RedisAtomic,
// redisstage.RedisSharded), and lists the items that have one.
type Repairer interface {
	Repair(ctx context.Context, id int64, staleAfter time.Duration, orderExists func(context.Context, string) (bool, error)) (redisstage.Drift, error)
	Copies(ctx context.Context) ([]int64, error)
}

// Target is one kind of item to reconcile.
type Target struct {
	Kind        string // "product" or "coupon"
	Items       Auditor
	Repairer    Repairer                                           // nil when no stage keeps a copy
	Buckets     Repairer                                           // redis-sharded's buckets; nil without them
	OrderExists func(ctx context.Context, no string) (bool, error) // needed with a Repairer or Buckets
	Activity    *Activity                                          // this instance's buys of the kind; nil: none told
}

// ItemResult is the finding for one item.
type ItemResult struct {
	Kind      string            `json:"kind"`
	ID        int64             `json:"id"`
	Oversold  int               `json:"oversold"`
	Conserved bool              `json:"conserved"`
	Drift     *redisstage.Drift `json:"redis_drift,omitempty"`
	// BucketDrift is how redis-sharded's buckets, summed, compared.
	BucketDrift *redisstage.Drift `json:"bucket_drift,omitempty"`
	Error       string            `json:"error,omitempty"`
	// Note says what the run found and could not repair.
	Note string `json:"note,omitempty"`
}

// lostCopy explains a Redis copy found missing: Redis lost its data (a
// restart without persistence, a failover to an empty replica). The copy
// is reloaded from the database, which knows every written order; what it
// cannot know are the orders redis-stream accepted and had not written,
// which lived only in Redis.
const lostCopy = "the Redis copy of the stock was missing and was reloaded from the database; " +
	"orders that redis-stream had accepted and not yet written, if any, were only in Redis and cannot be recovered: " +
	"their buyers hold a 202 whose order now answers order-not-found"

// Result is one run. Items holds every item the run checked; the summary
// published for the fleet (Last) holds only those in violation, and each
// item's finding is published on its own (LastFor).
type Result struct {
	At         time.Time    `json:"at"`
	Instance   string       `json:"instance"`
	Slot       int64        `json:"slot"`
	Violations int          `json:"violations"`
	Repairs    int          `json:"repairs"`
	Items      []ItemResult `json:"items"`
	// vouched are the quiet items, by kind, whose findings this run
	// vouched for (quiet.go).
	vouched map[string][]int64
}

// Options configure a Job.
type Options struct {
	Interval   time.Duration
	Instance   string
	Prefix     string        // Redis key prefix; default "seckill:reconcile:"
	StaleAfter time.Duration // age at which a redis-atomic reservation is settled; default 30s
	Logger     *slog.Logger
	// OnRun is called after each run this instance performed (metrics).
	OnRun func(Result)
}

// Job runs the reconcile loop of one instance.
type Job struct {
	locker  lock.Locker
	rdb     redis.UniversalClient
	targets []Target
	opts    Options
	seen    seenCopies // the copies registered at this instance's runs (work.go)
}

// New returns a Job. locker must be shared by the fleet (same Redis).
func New(locker lock.Locker, rdb redis.UniversalClient, targets []Target, opts Options) *Job {
	if opts.Prefix == "" {
		opts.Prefix = "seckill:reconcile:"
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Job{locker: locker, rdb: rdb, targets: targets, opts: opts, seen: seenCopies{ids: map[string]map[int64]bool{}}}
}

// Run wakes at every slot boundary (plus a little) until ctx ends.
func (j *Job) Run(ctx context.Context) {
	for {
		slot, ok := nextSlot(ctx, j.opts.Interval)
		if !ok {
			return
		}
		if _, ran, err := j.RunSlot(ctx, slot); err != nil && ctx.Err() == nil {
			j.opts.Logger.Warn("reconcile failed", "slot", slot, "ran", ran, "err", err)
		}
	}
}

// RunSlot runs the job for one slot unless another instance already did.
// It reports whether this instance ran it.
func (j *Job) RunSlot(ctx context.Context, slot int64) (Result, bool, error) {
	for _, t := range j.targets {
		if t.Activity == nil {
			continue
		}
		if err := t.Activity.flush(ctx, j.rdb, activeKey(j.opts.Prefix, t.Kind)); err != nil {
			j.opts.Logger.Warn("telling the fleet of this instance's buys failed; retried next run", "kind", t.Kind, "err", err)
		}
	}
	var res Result
	ran, err := onceInSlot(ctx, j.locker, j.rdb, j.opts, "reconcile", "slot:", slot, func(lctx context.Context) error {
		prev, _, err := Last(ctx, j.rdb, j.opts.Prefix)
		if err != nil {
			j.opts.Logger.Debug("reading the previous reconcile result failed", "err", err)
		}
		res = j.check(lctx, slot, prev)
		if err := j.publish(ctx, res); err != nil {
			return err
		}
		j.logChanges(prev, res)
		if j.opts.OnRun != nil {
			j.opts.OnRun(res)
		}
		return nil
	})
	return res, ran, err
}

//go:embed claim_slot.lua
var claimSlotSrc string

var claimSlot = redis.NewScript(claimSlotSrc)

// onceInSlot runs fn for one slot of the fleet's schedule, on at most one
// instance: under the named lock (no two runs overlap), and only if no
// instance has claimed the slot or a later one (no slot runs twice, and
// none after a later one). fn gets the lease's context, which ends when the
// lease is lost. It reports whether this instance ran fn.
func onceInSlot(ctx context.Context, locker lock.Locker, rdb redis.UniversalClient, opts Options, name, marker string, slot int64, fn func(ctx context.Context) error) (bool, error) {
	ttl := max(opts.Interval, 2*time.Second)
	lease, err := locker.Obtain(ctx, name, ttl, lock.ObtainOptions{})
	if errors.Is(err, lock.ErrNotObtained) {
		return false, nil // another instance is running it
	}
	if err != nil {
		return false, err
	}
	defer func() {
		if err := lease.Release(ctx); err != nil && !errors.Is(err, lock.ErrLockLost) {
			opts.Logger.Warn("releasing the job lock failed", "lock", name, "err", err)
		}
	}()
	keep := max(24*time.Hour, 10*opts.Interval)
	fresh, err := claimSlot.Run(lease.Context(), rdb, []string{opts.Prefix + marker + "last"}, slot, keep.Milliseconds()).Int()
	if err != nil || fresh != 1 {
		return false, err
	}
	if err := fn(lease.Context()); err != nil {
		return true, err
	}
	return true, lease.Err()
}

// nextSlot sleeps until the next slot boundary (plus a little) and returns
// the slot, or false when ctx ended.
func nextSlot(ctx context.Context, iv time.Duration) (int64, bool) {
	next := time.Now().Truncate(iv).Add(iv)
	t := time.NewTimer(time.Until(next) + iv/20)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return 0, false
	case <-t.C:
	}
	return next.UnixNano() / int64(iv), true
}

// check repairs and audits the items that have work (work.go); prev is
// the fleet's previous run, whose violations are checked again.
func (j *Job) check(ctx context.Context, slot int64, prev Result) Result {
	res := Result{At: time.Now().UTC(), Instance: j.opts.Instance, Slot: slot}
	for _, t := range j.targets {
		w, err := j.work(ctx, t, prev)
		if err != nil {
			res.Items = append(res.Items, ItemResult{Kind: t.Kind, Error: err.Error()})
			res.Violations++
			continue
		}
		if len(w.vouched) > 0 {
			if res.vouched == nil {
				res.vouched = map[string][]int64{}
			}
			res.vouched[t.Kind] = append(res.vouched[t.Kind], w.vouched...)
		}
		for _, id := range w.items {
			r := j.checkItem(ctx, t, w, id, &res)
			j.settle(ctx, t.Kind, w, id, r)
			if r.Error != "" || r.Oversold > 0 || !r.Conserved {
				res.Violations++
			}
			res.Items = append(res.Items, r)
		}
	}
	return res
}

// checkItem repairs the copies item id has, then audits it.
func (j *Job) checkItem(ctx context.Context, t Target, w work, id int64, res *Result) ItemResult {
	r := ItemResult{Kind: t.Kind, ID: id}
	if w.copy[id] {
		d, err := t.Repairer.Repair(ctx, id, j.opts.StaleAfter, t.OrderExists)
		if err != nil {
			r.Error = err.Error()
		} else {
			r.Drift = &d
			if d.Repaired || d.Resolved > 0 {
				res.Repairs++
			}
			if d.RedisStock < 0 && !d.Busy {
				// A registered copy that vanished: Redis lost its data.
				r.Note = lostCopy
				j.opts.Logger.Error("reconcile: "+lostCopy, "kind", t.Kind, "id", id)
			}
		}
	}
	if w.buckets[id] {
		// A repair of either copy counts once for the item.
		d, err := t.Buckets.Repair(ctx, id, j.opts.StaleAfter, t.OrderExists)
		if err != nil {
			r.Error = strings.TrimPrefix(r.Error+"; "+err.Error(), "; ")
		} else {
			r.BucketDrift = &d
			if (d.Repaired || d.Resolved > 0) && (r.Drift == nil || !r.Drift.Repaired && r.Drift.Resolved == 0) {
				res.Repairs++
			}
		}
	}
	a, err := t.Items.Audit(ctx, id)
	if err != nil {
		r.Error = errors.Join(errors.New(r.Error), err).Error()
	} else {
		r.Oversold, r.Conserved = a.Oversold(), a.Conserved()
	}
	return r
}
