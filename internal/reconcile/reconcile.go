// Package reconcile is the fleet's periodic bookkeeping: every interval,
// exactly one instance checks that every product and coupon batch conserves
// its stock (initial = stock + sold), repairs the Redis copy that the
// redis-atomic stage keeps, and publishes what it found for the audit
// endpoints.
//
// "Exactly one instance" is the scheduled-job dedupe that distributed locks
// are often used for. Time is cut into slots of one interval; an instance
// that wakes in a slot takes the reconcile lock, and inside it sets a marker
// for the slot unless one exists. The lock keeps two runs from overlapping;
// the marker keeps a second instance from running the same slot after the
// first released the lock.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/lock"
)

// Auditor is what the job reads: an inventory.Service has these.
type Auditor interface {
	List(ctx context.Context) ([]inventory.Item, error)
	Audit(ctx context.Context, id int64) (inventory.Audit, error)
}

// Repairer fixes a stage's own copy of the stock (inventory.RedisAtomic).
type Repairer interface {
	Repair(ctx context.Context, id int64, staleAfter time.Duration, orderExists func(context.Context, string) (bool, error)) (inventory.Drift, error)
}

// Target is one kind of item to reconcile.
type Target struct {
	Kind        string // "product" or "coupon"
	Items       Auditor
	Repairer    Repairer                                           // nil when no stage keeps a copy
	OrderExists func(ctx context.Context, no string) (bool, error) // needed with a Repairer
}

// ItemResult is the finding for one item.
type ItemResult struct {
	Kind      string           `json:"kind"`
	ID        int64            `json:"id"`
	Oversold  int              `json:"oversold"`
	Conserved bool             `json:"conserved"`
	Drift     *inventory.Drift `json:"redis_drift,omitempty"`
	Error     string           `json:"error,omitempty"`
}

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
	iv := j.opts.Interval
	for {
		next := time.Now().Truncate(iv).Add(iv)
		t := time.NewTimer(time.Until(next) + iv/20)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		slot := next.UnixNano() / int64(iv)
		if _, ran, err := j.RunSlot(ctx, slot); err != nil && ctx.Err() == nil {
			j.opts.Logger.Warn("reconcile failed", "slot", slot, "ran", ran, "err", err)
		}
	}
}

// RunSlot runs the job for one slot unless another instance already did.
// It reports whether this instance ran it.
func (j *Job) RunSlot(ctx context.Context, slot int64) (Result, bool, error) {
	ttl := max(j.opts.Interval, 2*time.Second)
	lease, err := j.locker.Obtain(ctx, "reconcile", ttl, lock.ObtainOptions{})
	if errors.Is(err, lock.ErrNotObtained) {
		return Result{}, false, nil // another instance is running it
	}
	if err != nil {
		return Result{}, false, err
	}
	defer func() {
		if err := lease.Release(ctx); err != nil && !errors.Is(err, lock.ErrLockLost) {
			j.opts.Logger.Warn("releasing the reconcile lock failed", "err", err)
		}
	}()
	marker := j.opts.Prefix + "slot:" + strconv.FormatInt(slot, 10)
	fresh, err := j.rdb.SetNX(lease.Context(), marker, j.opts.Instance, 3*j.opts.Interval+time.Second).Result()
	if err != nil || !fresh {
		return Result{}, false, err
	}
	res := j.check(lease.Context(), slot)
	if err := j.publish(ctx, res); err != nil {
		return res, true, err
	}
	if res.Violations > 0 {
		j.opts.Logger.Warn("reconcile found violations", "violations", res.Violations, "repairs", res.Repairs)
	}
	if j.opts.OnRun != nil {
		j.opts.OnRun(res)
	}
	return res, true, lease.Err()
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
