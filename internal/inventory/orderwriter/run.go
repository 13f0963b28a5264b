package orderwriter

import (
	"context"
	"errors"
	"strings"
	"time"
)

// When a writer works: its cost follows the items with queued orders,
// never the catalogue. An order this instance accepts wakes it (Wake); a
// recovery pass every Poll reads the set of items with work that
// enqueue.lua keeps (redisstage.RedisStream.WorkingItems: one read when
// the catalogue is idle) and takes up each item it is not on, which
// covers the orders other instances queued, the entries a dead writer
// left pending (taken over after ClaimIdle), and any wake-up lost to a
// restart or a failover. A worker runs one item's passes until a pass
// finds nothing, then takes the item out of the set in one script
// (drained.lua) unless entries remain, and ends. A worker whose round
// failed stays on its item and, after a backoff, tries the entries
// pending to it again (retry.go).

// round is a worker's state, guarded by Writer.mu: asked again while it
// ran (a wake-up or a recovery pass), and whether the recovery pass asked,
// which may take entries over.
type round struct{ again, claim bool }

// Wake tells the writer that the item has a new order.
func (w *Writer) Wake(id int64) {
	w.mu.Lock()
	w.woken[id] = true
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default: // Run has been told already
	}
}

// Run writes orders until ctx ends or the writer crashed (AfterWrite),
// one worker per item with work, and returns the crash's error or nil.
// It returns once every worker has ended.
func (w *Writer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ended := make(chan error)
	workers := 0
	var crash error
	start := func(id int64, claim bool) {
		if !w.enter(id, claim) {
			return
		}
		workers++
		go func() { ended <- w.work(ctx, id, claim) }()
	}
	end := func(err error) {
		workers--
		if err != nil && crash == nil {
			crash = err
			cancel(err)
		}
	}
	tick := time.NewTicker(w.opts.Poll)
	defer tick.Stop()
	w.recover(ctx, start) // a restarted instance finds what was left
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case err := <-ended:
			end(err)
		case <-w.signal:
			for _, id := range w.takeWoken() {
				start(id, false)
			}
		case <-tick.C:
			w.recover(ctx, start)
		}
	}
	for workers > 0 {
		end(<-ended)
	}
	return crash
}

// takeWoken returns the items woken since the last call.
func (w *Writer) takeWoken() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]int64, 0, len(w.woken))
	for id := range w.woken {
		ids = append(ids, id)
		delete(w.woken, id)
	}
	return ids
}

// enter marks the item busy and reports true, or, when a worker is on it
// already, asks that worker for another round and reports false.
func (w *Writer) enter(id int64, claim bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.busy[id]; ok {
		r.again, r.claim = true, r.claim || claim
		return false
	}
	w.busy[id] = &round{}
	return true
}

// leave ends the worker's round: it reports whether another was asked
// for (and whether that may take over), or marks the item free.
func (w *Writer) leave(ctx context.Context, id int64) (again, claim bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.busy[id]
	if r.again && ctx.Err() == nil {
		again, claim = true, r.claim
		r.again, r.claim = false, false
		return again, claim
	}
	delete(w.busy, id)
	return false, false
}

// work runs rounds of the item's passes while asked, and after a failed
// round, a retry round of its own pending entries after a backoff.
func (w *Writer) work(ctx context.Context, id int64, claim bool) error {
	wait := backoff{first: w.opts.RetryBackoff, max: w.opts.RetryBackoffMax}
	retry := false
	for again := true; again; {
		left, err := w.drain(ctx, id, claim, retry)
		if errors.Is(err, errCrashed) {
			w.leave(ctx, id)
			return err
		}
		failed := err != nil && ctx.Err() == nil
		if err != nil || left != out || w.hadBacklog(id) {
			// A drained item never reported needs no report (nor its
			// two reads): an order's cost stays with its item.
			w.report(ctx, id)
		}
		if !failed {
			wait.next, retry = 0, false
			again, claim = w.leave(ctx, id)
			continue
		}
		// What the round read and could not finish is pending to this
		// writer: it keeps the item and tries again after the wait.
		d := wait.wait()
		w.opts.Logger.Warn("order writer: pass failed; retrying", "stream", w.q.QueueKeys(id).Stream, "in", d, "err", err)
		if !w.retryAfter(ctx, id, d) {
			w.leave(ctx, id)
			return nil
		}
		retry, claim = true, w.resume(id)
	}
	return nil
}

// hadBacklog tells whether the item's last report was of a backlog.
func (w *Writer) hadBacklog(id int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reported[id]
}

// drain runs passes over the item's stream until one finds nothing and
// nothing waits undelivered, then takes the item out of the set of items
// with work unless entries are pending, and returns which (out, pending). claim asks the first pass to take
// over entries left pending ClaimIdle, at most every ClaimIdle/2 per item;
// a long drain takes over as often. own (a retry round) has the passes
// read the entries pending to this writer first, until they are done.
func (w *Writer) drain(ctx context.Context, id int64, claim, own bool) (int, error) {
	stream := w.q.QueueKeys(id).Stream
	began, lastTrim, lastReport := time.Now(), time.Now(), time.Now()
	untrimmed := false // entries were handled since the last trim
	for ctx.Err() == nil {
		claim = w.claimDue(id, claim || time.Since(began) >= w.opts.ClaimIdle/2)
		if claim {
			began = time.Now()
		}
		n, moreOwn, err := w.pass(ctx, id, claim, own)
		claim, own = false, moreOwn
		untrimmed = untrimmed || n > 0
		// Trim at most once a second while busy, and once when idle again.
		if untrimmed && (n == 0 || time.Since(lastTrim) > time.Second) {
			if err := w.trim(ctx, stream); err != nil && ctx.Err() == nil {
				w.opts.Logger.Warn("order writer: trimming the stream failed", "stream", stream, "err", err)
			}
			lastTrim, untrimmed = time.Now(), false
		}
		if err != nil || n > 0 {
			if err != nil {
				return pending, err
			}
			if time.Since(lastReport) > 250*time.Millisecond {
				w.report(ctx, id)
				lastReport = time.Now()
			}
			continue // there may be more
		}
		if left, err := w.drained(ctx, id); err != nil || left != undelivered {
			return left, err
		}
	}
	return pending, nil
}

// claimDue reports whether a take-over asked for is due: the item's last
// was ClaimIdle/2 ago or more (a claim by an item's recovery round, or a
// long drain's); it notes the take-over when due.
func (w *Writer) claimDue(id int64, asked bool) bool {
	if !asked {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.claimed[id]) < w.opts.ClaimIdle/2 {
		return false
	}
	w.claimed[id] = time.Now()
	return true
}

// What drained.lua found.
const (
	pending     = 0 // entries delivered and not acknowledged: the item stays
	out         = 1 // drained: the item is out of the set of items with work
	undelivered = 2 // entries queued since the last read: read again
)

// drained checks that the item's queue is drained and takes the item out
// of the set of items with work if so (drained.lua).
func (w *Writer) drained(ctx context.Context, id int64) (int, error) {
	if w.opts.BeforeDrained != nil {
		w.opts.BeforeDrained(id)
	}
	k := w.q.QueueKeys(id)
	left, err := drainedScript.Run(ctx, w.rdb, []string{k.Stream, k.Work}, GroupName, id).Int()
	if err == nil && left == out {
		w.mu.Lock()
		delete(w.claimed, id)
		w.mu.Unlock()
	}
	return left, err
}

// recover takes up every item with work (claim: it may take entries
// over), and reports the end of the backlog of items this writer last
// saw with one and that have none now.
func (w *Writer) recover(ctx context.Context, start func(id int64, claim bool)) {
	ids, err := w.q.WorkingItems(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.opts.Logger.Warn("order writer: reading the items with queued orders failed", "err", err)
		}
		return
	}
	working := make(map[int64]bool, len(ids))
	for _, id := range ids {
		working[id] = true
		start(id, true)
	}
	for _, id := range w.staleReports(working) {
		w.report(ctx, id)
	}
}

// staleReports returns the items reported with a backlog, not in working
// and no worker on.
func (w *Writer) staleReports(working map[int64]bool) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []int64
	for id := range w.reported {
		if _, busy := w.busy[id]; !busy && !working[id] {
			ids = append(ids, id)
		}
	}
	return ids
}

// report hands the item's backlog to the Backlog hook, if it has one or
// had one when last reported.
func (w *Writer) report(ctx context.Context, id int64) {
	if w.opts.Hooks.Backlog == nil {
		return
	}
	k := w.q.QueueKeys(id)
	queued, err := w.rdb.HLen(ctx, k.Queued).Result()
	if err != nil {
		return
	}
	var count int64
	p, err := w.rdb.XPending(ctx, k.Stream, GroupName).Result()
	switch {
	case err == nil:
		count = p.Count
	case !strings.HasPrefix(err.Error(), "NOGROUP"): // no group: nothing pending
		return
	}
	w.mu.Lock()
	had := w.reported[id]
	if queued > 0 || count > 0 {
		w.reported[id] = true
	} else {
		delete(w.reported, id)
	}
	w.mu.Unlock()
	if had || queued > 0 || count > 0 {
		w.opts.Hooks.Backlog(id, int(queued), int(count))
	}
}
