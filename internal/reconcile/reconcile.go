// Package reconcile is the fleet's periodic bookkeeping: every interval,
// exactly one instance checks that every product and coupon batch conserves
// its stock (initial = stock + sold), repairs the Redis copy that the
// redis-atomic stage keeps and the buckets of redis-sharded, and publishes
// what it found for the audit endpoints.
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
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/lock"
)

// Auditor is what the job reads: an inventory.Service has these.
type Auditor interface {
	List(ctx context.Context) ([]inventory.Item, error)
	Audit(ctx context.Context, id int64) (inventory.Audit, error)
}

// Repairer fixes a stage's own copy of the stock (redisstage.RedisAtomic).
type Repairer interface {
	Repair(ctx context.Context, id int64, staleAfter time.Duration, orderExists func(context.Context, string) (bool, error)) (redisstage.Drift, error)
}

// Target is one kind of item to reconcile.
type Target struct {
	Kind        string // "product" or "coupon"
	Items       Auditor
	Repairer    Repairer                                           // nil when no stage keeps a copy
	Buckets     Repairer                                           // redis-sharded's buckets; nil without them
	OrderExists func(ctx context.Context, no string) (bool, error) // needed with a Repairer or Buckets
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

// Result is one run.
type Result struct {
	At         time.Time    `json:"at"`
	Instance   string       `json:"instance"`
	Slot       int64        `json:"slot"`
	Violations int          `json:"violations"`
	Repairs    int          `json:"repairs"`
	Items      []ItemResult `json:"items"`
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
	return &Job{locker: locker, rdb: rdb, targets: targets, opts: opts}
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
	var res Result
	ran, err := onceInSlot(ctx, j.locker, j.rdb, j.opts, "reconcile", "slot:", slot, func(lctx context.Context) error {
		res = j.check(lctx, slot)
		prev, _, err := Last(ctx, j.rdb, j.opts.Prefix)
		if err != nil {
			j.opts.Logger.Debug("reading the previous reconcile result failed", "err", err)
		}
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

func (j *Job) check(ctx context.Context, slot int64) Result {
	res := Result{At: time.Now().UTC(), Instance: j.opts.Instance, Slot: slot}
	for _, t := range j.targets {
		items, err := t.Items.List(ctx)
		if err != nil {
			res.Items = append(res.Items, ItemResult{Kind: t.Kind, Error: err.Error()})
			res.Violations++
			continue
		}
		for _, it := range items {
			r := ItemResult{Kind: t.Kind, ID: it.ID}
			if t.Repairer != nil {
				d, err := t.Repairer.Repair(ctx, it.ID, j.opts.StaleAfter, t.OrderExists)
				if err != nil {
					r.Error = err.Error()
				} else {
					r.Drift = &d
					if d.Repaired || d.Resolved > 0 {
						res.Repairs++
					}
					if d.RedisStock < 0 {
						r.Note = lostCopy
						j.opts.Logger.Error("reconcile: "+lostCopy, "kind", t.Kind, "id", it.ID)
					}
				}
			}
			if t.Buckets != nil {
				// A repair of either copy counts once for the item.
				d, err := t.Buckets.Repair(ctx, it.ID, j.opts.StaleAfter, t.OrderExists)
				if err != nil {
					r.Error = strings.TrimPrefix(r.Error+"; "+err.Error(), "; ")
				} else {
					r.BucketDrift = &d
					if (d.Repaired || d.Resolved > 0) && (r.Drift == nil || !r.Drift.Repaired && r.Drift.Resolved == 0) {
						res.Repairs++
					}
				}
			}
			a, err := t.Items.Audit(ctx, it.ID)
			if err != nil {
				r.Error = errors.Join(errors.New(r.Error), err).Error()
			} else {
				r.Oversold, r.Conserved = a.Oversold(), a.Conserved()
			}
			if r.Error != "" || r.Oversold > 0 || !r.Conserved {
				res.Violations++
			}
			res.Items = append(res.Items, r)
		}
	}
	return res
}

func (j *Job) publish(ctx context.Context, res Result) error {
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	keep := max(24*time.Hour, 10*j.opts.Interval)
	if err := j.rdb.Set(context.WithoutCancel(ctx), j.opts.Prefix+"last", b, keep).Err(); err != nil {
		return fmt.Errorf("publish reconcile result: %w", err)
	}
	return nil
}

// logChanges logs each item whose finding changed since the fleet's previous
// run, naming it: a violation once when it appears or changes, and once
// when it is gone, not again on every run while it stays the same.
func (j *Job) logChanges(prev, cur Result) {
	key := func(r ItemResult) string { return r.Kind + ":" + strconv.FormatInt(r.ID, 10) }
	bad := func(r ItemResult) bool { return r.Error != "" || r.Oversold > 0 || !r.Conserved }
	same := func(a, b ItemResult) bool {
		return a.Oversold == b.Oversold && a.Conserved == b.Conserved && a.Error == b.Error
	}
	before := map[string]ItemResult{}
	for _, r := range prev.Items {
		before[key(r)] = r
	}
	for _, r := range cur.Items {
		p, seen := before[key(r)]
		switch {
		case bad(r) && (!seen || !bad(p) || !same(p, r)):
			j.opts.Logger.Warn("reconcile found a violation", "kind", r.Kind, "item", r.ID, "oversold", r.Oversold, "conserved", r.Conserved, "err", r.Error)
		case !bad(r) && seen && bad(p):
			j.opts.Logger.Info("reconcile: violation gone", "kind", r.Kind, "item", r.ID)
		}
	}
}

// Finding is one item's finding in the fleet's newest run.
type Finding struct {
	At       time.Time
	Instance string // the instance that ran it
	Item     ItemResult
}

// LastFor returns the item's finding in the newest published run. ok is
// false when there is none, or when the item was reset after that run (see
// MarkReset): a finding about the stock before a reset says nothing about
// the stock after it.
func LastFor(ctx context.Context, rdb redis.UniversalClient, prefix, kind string, id int64) (f Finding, ok bool, err error) {
	res, ok, err := Last(ctx, rdb, prefix)
	if err != nil || !ok {
		return Finding{}, false, err
	}
	for _, it := range res.Items {
		if it.Kind != kind || it.ID != id {
			continue
		}
		resetAt, err := rdb.Get(ctx, resetKey(prefix, kind, id)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Finding{}, false, err
		}
		if resetAt >= res.At.UnixNano() {
			return Finding{}, false, nil
		}
		return Finding{At: res.At, Instance: res.Instance, Item: it}, true, nil
	}
	return Finding{}, false, nil
}

// MarkReset records, for the fleet, that the item was reset now, so that
// LastFor hides findings from before. Call it after the reset.
func MarkReset(ctx context.Context, rdb redis.UniversalClient, prefix, kind string, id int64) error {
	return rdb.Set(ctx, resetKey(prefix, kind, id), time.Now().UnixNano(), 24*time.Hour).Err()
}

func resetKey(prefix, kind string, id int64) string {
	if prefix == "" {
		prefix = "seckill:reconcile:"
	}
	return prefix + "reset:" + kind + ":" + strconv.FormatInt(id, 10)
}

// Last reads the newest published result; ok is false when none exists.
func Last(ctx context.Context, rdb redis.UniversalClient, prefix string) (res Result, ok bool, err error) {
	if prefix == "" {
		prefix = "seckill:reconcile:"
	}
	b, err := rdb.Get(ctx, prefix+"last").Bytes()
	if errors.Is(err, redis.Nil) {
		return Result{}, false, nil
	}
	if err != nil {
		return Result{}, false, err
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return Result{}, false, err
	}
	return res, true, nil
}
