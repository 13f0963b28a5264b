package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// What a run publishes, and what the audits read of it: each item's
// finding under a key of its own, so that an item's audit reads one small
// key, not the whole catalogue's findings; and the run's summary (Last),
// which names only the items in violation.

// published is one item's finding as stored.
type published struct {
	At       time.Time  `json:"at"`
	Instance string     `json:"instance"`
	Item     ItemResult `json:"item"`
}

// keep is how long a published finding or summary lives.
func (j *Job) keep() time.Duration { return max(24*time.Hour, 10*j.opts.Interval) }

// publish writes each checked item's finding, then the summary.
func (j *Job) publish(ctx context.Context, res Result) error {
	ctx = context.WithoutCancel(ctx)
	sum := res
	sum.Items = nil
	pipe := j.rdb.Pipeline()
	for _, it := range res.Items {
		if bad(it) {
			sum.Items = append(sum.Items, it)
		}
		if it.ID == 0 {
			continue // a kind whose work could not be listed
		}
		b, err := json.Marshal(published{At: res.At, Instance: res.Instance, Item: it})
		if err != nil {
			return err
		}
		pipe.Set(ctx, findingKey(j.opts.Prefix, it.Kind, it.ID), b, j.keep())
	}
	by := strconv.FormatInt(res.At.UnixNano(), 10) + "|" + res.Instance
	for kind, ids := range res.vouched {
		fields := make([]any, 0, 2*len(ids))
		for _, id := range ids {
			fields = append(fields, strconv.FormatInt(id, 10), by)
		}
		pipe.HSet(ctx, vouchedKey(j.opts.Prefix, kind), fields...)
		pipe.PExpire(ctx, vouchedKey(j.opts.Prefix, kind), j.keep())
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	pipe.Set(ctx, prefixOr(j.opts.Prefix)+"last", b, j.keep())
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("publish reconcile result: %w", err)
	}
	return nil
}

// bad says whether a finding is a violation.
func bad(r ItemResult) bool { return r.Error != "" || r.Oversold > 0 || !r.Conserved }

// logChanges logs each item whose finding changed since the fleet's previous
// run (whose summary names its violations), naming it: a violation once
// when it appears or changes, and once when it is gone, not again on every
// run while it stays the same.
func (j *Job) logChanges(prev, cur Result) {
	key := func(r ItemResult) string { return r.Kind + ":" + strconv.FormatInt(r.ID, 10) }
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

// Finding is one item's finding in the newest run that checked it.
type Finding struct {
	At       time.Time
	Instance string // the instance that ran it
	Item     ItemResult
	// CheckedAt is when Item was found in a full check: At, or earlier
	// when the run at At found the item's copy as that check left it.
	CheckedAt time.Time
}

// LastFor returns the item's finding in the newest run that checked it:
// one key read, whatever the size of the catalogue. ok is false when there
// is none (no run has had work for the item), or when the item was reset
// after that run (see MarkReset): a finding about the stock before a reset
// says nothing about the stock after it.
func LastFor(ctx context.Context, rdb redis.UniversalClient, prefix, kind string, id int64) (f Finding, ok bool, err error) {
	pipe := rdb.Pipeline()
	get := pipe.Get(ctx, findingKey(prefix, kind, id))
	reset := pipe.Get(ctx, resetKey(prefix, kind, id))
	vouched := pipe.HGet(ctx, vouchedKey(prefix, kind), strconv.FormatInt(id, 10))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Finding{}, false, err
	}
	b, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return Finding{}, false, nil
	}
	if err != nil {
		return Finding{}, false, err
	}
	var p published
	if err := json.Unmarshal(b, &p); err != nil {
		return Finding{}, false, err
	}
	f = Finding{At: p.At, Instance: p.Instance, Item: p.Item, CheckedAt: p.At}
	if at, by, ok := parseVouch(vouched.Val()); ok && at.After(f.At) {
		f.At, f.Instance = at, by
	}
	resetAt, err := reset.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return Finding{}, false, err
	}
	if resetAt >= f.At.UnixNano() {
		return Finding{}, false, nil
	}
	return f, true, nil
}

// parseVouch reads a vouchedKey field: "<unix nanos>|<instance>".
func parseVouch(v string) (time.Time, string, bool) {
	at, by, ok := strings.Cut(v, "|")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return time.Time{}, "", false
	}
	return time.Unix(0, n).UTC(), by, true
}

// MarkReset records, for the fleet, that the item was reset now, so that
// LastFor hides findings from before, and gives the next run the item to
// check (work.go). Call it after the reset.
func MarkReset(ctx context.Context, rdb redis.UniversalClient, prefix, kind string, id int64) error {
	if err := rdb.Set(ctx, resetKey(prefix, kind, id), time.Now().UnixNano(), 24*time.Hour).Err(); err != nil {
		return err
	}
	return rdb.SAdd(ctx, activeKey(prefix, kind), id).Err()
}

func prefixOr(prefix string) string {
	if prefix == "" {
		return "seckill:reconcile:"
	}
	return prefix
}

func resetKey(prefix, kind string, id int64) string {
	return prefixOr(prefix) + "reset:" + kind + ":" + strconv.FormatInt(id, 10)
}

func findingKey(prefix, kind string, id int64) string {
	return prefixOr(prefix) + "finding:" + kind + ":" + strconv.FormatInt(id, 10)
}

// activeKey is the set of kind's items reset or bought since the last run.
func activeKey(prefix, kind string) string { return prefixOr(prefix) + "active:" + kind }

// Last reads the newest run's summary; ok is false when none exists. Its
// Items are the items that run found in violation.
func Last(ctx context.Context, rdb redis.UniversalClient, prefix string) (res Result, ok bool, err error) {
	b, err := rdb.Get(ctx, prefixOr(prefix)+"last").Bytes()
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
