// Package orderwriter writes the orders that the redis-stream stage
// (redisstage.RedisStream) queued: redis-stream's consumer. Every instance runs one, in
// one consumer group per item stream, so each entry goes to one writer at
// a time; an entry left unacknowledged by a writer that died is claimed by
// another after ClaimIdle (XAUTOCLAIM), which delivers it again. A writer
// works only on the items with queued orders (run.go), never the whole
// catalogue. Delivery is at least once, and the effects are made exactly
// once:
//
//   - The database decides each order's fate once. The order is written
//     with db-atomic's guarded decrement; a second write of the same order
//     fails on the unique order number, and the writer reads the row that
//     won instead. An order that cannot be written is written as failed,
//     so a writer that comes second learns the fate from the same key.
//   - The Redis side is settled by scripts that act only while the order
//     is still in the queued hash, and remove it: a redelivered entry
//     cannot give its units back twice, nor count twice.
//
// Transient failures (database or Redis unreachable, overloaded) leave the
// entry pending to its writer, which tries it again after a backoff
// (retry.go), and another writer takes it over after ClaimIdle. Other
// failures are tried until the entry was delivered MaxDeliveries times,
// then the order is given up on as failed.
//
// The stage's own side of the queue stays in package inventory, as methods
// of the stage: the enqueue script and the durability levels a 202 waits
// for (redisstage/durability.go), and the reads of what is queued (Backlog, Lookup,
// QueuedOrderOf in redisstage/redis_stream_queue.go), which the stage's buys and the
// lifecycle jobs use. So does redis-atomic's group commit
// (redisstage/group_commit.go): it writes the 201 path's sales, inside Buy.
package orderwriter

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
)

// The writer's scripts, one file each in scripts/: settle.lua marks
// written orders settled, dead_letter.lua gives one up.
var (
	//go:embed scripts/*.lua
	scriptFiles   embed.FS
	settle        = script("settle")
	deadLetter    = script("dead_letter")
	drainedScript = script("drained")
)

func script(name string) *redis.Script {
	b, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(err) // a missing file fails at start, in every test
	}
	return redis.NewScript(string(b))
}

// Order is the inventory's order, which the writer writes.
type Order = inventory.Order

// GroupName is the consumer group of the order writers.
const GroupName = "writers"

// Store is what the writer needs from the store (*store.Ledger).
type Store interface {
	inventory.Deducter
	// DeductAll writes many orders of one item in one transaction, all or
	// none (inventory.ErrSoldOut, inventory.ErrAlreadyPurchased, or a transient error).
	DeductAll(ctx context.Context, orders []Order) error
	// MarkFailed writes o as failed, taking no stock; inventory.ErrAlreadyPurchased
	// when the order number or the buyer has a row already.
	MarkFailed(ctx context.Context, o Order) error
	// FindOrder returns the written order, or inventory.ErrOrderNotFound.
	FindOrder(ctx context.Context, no string) (Order, error)
}

// Hooks receive what a writer did; metrics implement them. Each may
// be nil.
type Hooks struct {
	// Confirmed is called once per order a writer settled as written, with
	// the time from acceptance to the database write.
	Confirmed func(toConfirm time.Duration)
	// DeadLettered is called once per order given up on, with the reason.
	DeadLettered func(reason string)
	// Claimed is called with the entries taken over from other writers.
	Claimed func(n int)
	// Backlog is called, for an item whose queue holds work, with the
	// orders accepted and not yet written and the entries delivered and
	// not yet acknowledged: when a writer leaves the item, and every
	// 250ms while it writes. When the queue is empty again it is called
	// once more with zeros, and then no more: an idle item costs nothing.
	Backlog func(item int64, queued, pending int)
}

// Options tune a Writer.
type Options struct {
	// Consumer names this writer in the group; unique per process.
	Consumer string
	// Batch is how many entries one read takes. Default 64.
	Batch int
	// Poll is how often the writer reads which items have queued orders
	// (the set enqueue.lua keeps, never the catalogue) and takes up
	// those it is not on: the orders another instance queued, entries a
	// dead writer left pending, wake-ups lost. Its own instance's orders
	// wake it at once. Default 1s.
	Poll time.Duration
	// ClaimIdle is how long an entry stays unacknowledged before another
	// writer takes it over. It must exceed the longest write (a database
	// write under load takes a few seconds at worst): a slow writer's
	// entry taken over is written twice, which the unique order number
	// absorbs, but costs a write. Default 10s.
	ClaimIdle time.Duration
	// MaxDeliveries bounds the deliveries (reads and take-overs, not a
	// writer's own retries) of an entry that fails in a way that is
	// neither transient nor final. Default 10.
	MaxDeliveries int64
	// RetryBackoff is how long a writer whose round failed (an entry it
	// read not written, a transient error) waits before it tries its own
	// pending entries again; each failed round in a row doubles the wait,
	// up to RetryBackoffMax. Defaults 50ms and 2s.
	RetryBackoff, RetryBackoffMax time.Duration
	// WriteTimeout bounds one order's database write. Default 10s.
	WriteTimeout time.Duration
	Hooks        Hooks
	Logger       *slog.Logger
	// AfterWrite, when set, runs after an order reached the database and
	// before it is settled in Redis; an error stops the writer there, as a
	// crash would. Tests use it.
	AfterWrite func(o Order) error
	// BeforeDrained, when set, runs when a pass found nothing to read,
	// before the writer checks that the item's queue is drained and
	// takes it out of the items with work. Tests use it.
	BeforeDrained func(id int64)
	// BeforeRetry, when set, runs when a worker whose round failed starts
	// its wait before the retry round, with the wait. Tests use it.
	BeforeRetry func(id int64, wait time.Duration)
}

// Writer writes the orders of one kind of item that redis-stream queued.
type Writer struct {
	q     *redisstage.RedisStream
	rdb   redis.UniversalClient
	store Store
	opts  Options
	// restocked hears of units that went back to the copy (a Crowd's
	// Restocked), so that no instance keeps answering "sold out".
	restocked func(ctx context.Context, id int64) error

	mu       sync.Mutex
	woken    map[int64]bool      // items woken since Run last looked
	signal   chan struct{}       // Run is told of woken items here
	busy     map[int64]*round    // the items a worker is on
	claimed  map[int64]time.Time // the last take-over (XAUTOCLAIM) of an item with work
	reported map[int64]bool      // items whose last reported backlog was not empty
}

// New returns a writer of q's orders into store. It takes over q's
// wake-ups: an order this instance accepts is written by this writer
// without waiting for its recovery pass. Build it before q serves its first buy
// (the wake-up is set here, unguarded).
func New(q *redisstage.RedisStream, store Store, opts Options) *Writer {
	if opts.Batch <= 0 {
		opts.Batch = 64
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.ClaimIdle <= 0 {
		opts.ClaimIdle = 10 * time.Second
	}
	if opts.MaxDeliveries <= 0 {
		opts.MaxDeliveries = 10
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = 50 * time.Millisecond
	}
	if opts.RetryBackoffMax <= 0 {
		opts.RetryBackoffMax = 2 * time.Second
	}
	opts.RetryBackoffMax = max(opts.RetryBackoffMax, opts.RetryBackoff)
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Consumer == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic(err) // crypto/rand never fails on supported platforms
		}
		opts.Consumer = "writer-" + hex.EncodeToString(b[:])
	}
	w := &Writer{q: q, rdb: q.Client(), store: store, opts: opts,
		woken: map[int64]bool{}, signal: make(chan struct{}, 1), busy: map[int64]*round{},
		claimed: map[int64]time.Time{}, reported: map[int64]bool{}}
	q.OnAccept(w.Wake)
	return w
}

// OnRestock makes the writer call f after a failed order's units went back
// to the copy (a Crowd's Restocked).
func (w *Writer) OnRestock(f func(ctx context.Context, id int64) error) { w.restocked = f }

// errCrashed stops a writer whose AfterWrite hook failed.
var errCrashed = errors.New("order writer stopped after a write")

// pass reads the entries pending to this writer (when own is set: a
// retry round), takes over entries idle for ClaimIdle (when claim is set),
// then reads new ones unless it found its own, and handles each. It
// returns how many it handled, and whether its own filled the batch (more
// may be pending to it).
func (w *Writer) pass(ctx context.Context, id int64, claim, own bool) (n int, moreOwn bool, err error) {
	stream := w.q.QueueKeys(id).Stream
	var msgs []redis.XMessage
	if own {
		mine, err := w.own(ctx, id)
		if err != nil {
			return 0, false, err
		}
		msgs, moreOwn = mine, len(mine) >= w.opts.Batch
	}
	ownN := len(msgs)
	if claim {
		claimed, _, err := w.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: stream, Group: GroupName, Consumer: w.opts.Consumer,
			MinIdle: w.opts.ClaimIdle, Start: "0-0", Count: int64(w.opts.Batch),
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if err := w.missingGroup(ctx, id, err); err != nil {
				return 0, moreOwn, err
			}
		}
		if len(claimed) > 0 && w.opts.Hooks.Claimed != nil {
			w.opts.Hooks.Claimed(len(claimed))
		}
		msgs = appendNew(msgs, ownN, claimed) // its own idle entries, taken over by itself, are read already
	}
	if ownN > 0 {
		// The next pass reads new entries, once its own are done.
		return len(msgs), moreOwn, w.handleAll(ctx, id, msgs)
	}
	read := &redis.XReadGroupArgs{
		Group: GroupName, Consumer: w.opts.Consumer, Streams: []string{stream, ">"},
		Count: int64(w.opts.Batch), Block: -1, // no BLOCK: a wake-up or the recovery pass says when to look again
	}
	res, err := w.rdb.XReadGroup(ctx, read).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		if err := w.missingGroup(ctx, id, err); err != nil {
			return 0, false, err
		}
		res, err = w.rdb.XReadGroup(ctx, read).Result() // the group exists now
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, false, err
		}
	}
	for _, s := range res {
		msgs = append(msgs, s.Messages...)
	}
	if len(msgs) == 0 {
		return 0, false, nil
	}
	return len(msgs), false, w.handleAll(ctx, id, msgs)
}

// appendNew appends to msgs the entries of more that are not among its
// first n.
func appendNew(msgs []redis.XMessage, n int, more []redis.XMessage) []redis.XMessage {
	if n == 0 {
		return append(msgs, more...)
	}
	seen := make(map[string]bool, n)
	for _, m := range msgs[:n] {
		seen[m.ID] = true
	}
	for _, m := range more {
		if !seen[m.ID] {
			msgs = append(msgs, m)
		}
	}
	return msgs
}

// handleAll settles a batch of entries. The orders still in flight are
// written in one transaction (one lock of the hot row for the batch) and
// settled by one script; a batch that cannot be written whole (an order
// redelivered, too little stock left for all) is taken one order at a
// time, each to its own fate.
func (w *Writer) handleAll(ctx context.Context, id int64, msgs []redis.XMessage) error {
	var errs []error
	var orders []Order
	var entries []string
	for _, m := range msgs {
		o, err := parseEntry(id, m)
		if err != nil {
			if err := w.malformed(ctx, id, m, err); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		orders, entries = append(orders, o), append(entries, m.ID)
	}
	if len(orders) == 0 {
		return errors.Join(errs...)
	}
	nos := make([]string, len(orders))
	for i, o := range orders {
		nos[i] = o.No
	}
	flags, err := w.rdb.HMGet(ctx, w.q.QueueKeys(id).Queued, nos...).Result()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err))...)
	}
	var live []Order
	var liveEntries, settled []string
	for i, f := range flags {
		if f == nil {
			// Settled already (another writer wrote or failed it, and
			// the row or the failed hash says so), or dropped by a
			// reset: only the acknowledgement is left to do.
			settled = append(settled, entries[i])
			continue
		}
		live, liveEntries = append(live, orders[i]), append(liveEntries, entries[i])
	}
	if len(settled) > 0 {
		if err := w.rdb.XAck(ctx, w.q.QueueKeys(id).Stream, GroupName, settled...).Err(); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err))
		}
	}
	if len(live) == 0 {
		return errors.Join(errs...)
	}
	now := time.Now().UTC()
	for i := range live {
		live[i].Status, live[i].WrittenAt = inventory.StatusConfirmed, now
	}
	wctx, cancel := context.WithTimeout(ctx, w.opts.WriteTimeout)
	err = w.store.DeductAll(wctx, live)
	cancel()
	switch {
	case err == nil:
		if w.opts.AfterWrite != nil {
			for _, o := range live {
				if herr := w.opts.AfterWrite(o); herr != nil {
					return fmt.Errorf("%w: %w", errCrashed, herr)
				}
			}
		}
		return errors.Join(append(errs, w.settle(ctx, id, liveEntries, live))...)
	case inventory.Transient(err):
		return errors.Join(append(errs, err)...)
	}
	for i, o := range live {
		if ctx.Err() != nil {
			break
		}
		if err := w.handle(ctx, id, liveEntries[i], o); err != nil {
			if errors.Is(err, errCrashed) {
				return err
			}
			errs = append(errs, fmt.Errorf("entry %s: %w", liveEntries[i], err))
		}
	}
	return errors.Join(errs...)
}

// missingGroup creates the consumer group when a read found none: on the
// first run, or after Redis lost its data, when the orders it held (the
// accepted, not yet written ones) are gone with it. It returns err unless
// the group was missing.
func (w *Writer) missingGroup(ctx context.Context, id int64, err error) error {
	if !strings.HasPrefix(err.Error(), "NOGROUP") {
		return err
	}
	// "0": entries queued before the group existed are written too.
	cerr := w.rdb.XGroupCreateMkStream(ctx, w.q.QueueKeys(id).Stream, GroupName, "0").Err()
	if cerr != nil && !strings.HasPrefix(cerr.Error(), "BUSYGROUP") {
		return cerr
	}
	return nil
}

// handle writes one order still in flight and settles it: written,
// failed, or left for a later try.
func (w *Writer) handle(ctx context.Context, id int64, entry string, o Order) error {
	wctx, cancel := context.WithTimeout(ctx, w.opts.WriteTimeout)
	defer cancel()
	o.Status, o.WrittenAt = inventory.StatusConfirmed, time.Now().UTC()
	err := w.store.Deduct(wctx, o)
	switch {
	case err == nil:
		if w.opts.AfterWrite != nil {
			if herr := w.opts.AfterWrite(o); herr != nil {
				return fmt.Errorf("%w: %w", errCrashed, herr)
			}
		}
		return w.settle(ctx, id, []string{entry}, []Order{o})
	case errors.Is(err, inventory.ErrAlreadyPurchased):
		return w.resolve(wctx, id, entry, o)
	case errors.Is(err, inventory.ErrSoldOut):
		return w.fail(wctx, id, entry, o, "sold-out")
	case errors.Is(err, inventory.ErrNotFound):
		return w.fail(wctx, id, entry, o, "not-found")
	case inventory.Transient(err):
		return err
	}
	n, perr := w.deliveries(ctx, id, entry)
	if perr == nil && n >= w.opts.MaxDeliveries {
		w.opts.Logger.Error("order writer: giving up on an order after repeated failures", "order", o.No, "deliveries", n, "err", err)
		return w.fail(wctx, id, entry, o, "write-failed")
	}
	return err
}

// resolve settles an order whose write found a row with its number or its
// buyer: the row that won says the fate.
func (w *Writer) resolve(ctx context.Context, id int64, entry string, o Order) error {
	row, err := w.store.FindOrder(ctx, o.No)
	switch {
	case errors.Is(err, inventory.ErrOrderNotFound):
		// Not this order: the buyer has another one. It can never be
		// written; there is no row to record it in.
		return w.giveUp(ctx, id, entry, o, "already-purchased")
	case err != nil:
		return err
	case row.Status == inventory.StatusFailed:
		return w.giveUp(ctx, id, entry, o, "failed")
	}
	return w.settle(ctx, id, []string{entry}, []Order{row})
}

// fail writes o as failed, unless another writer wrote it first, then
// gives it up.
func (w *Writer) fail(ctx context.Context, id int64, entry string, o Order, reason string) error {
	err := w.store.MarkFailed(ctx, o)
	switch {
	case errors.Is(err, inventory.ErrAlreadyPurchased):
		return w.resolve(ctx, id, entry, o)
	case err != nil:
		return err
	}
	return w.giveUp(ctx, id, entry, o, reason)
}

// settle marks written orders settled in Redis and acknowledges their
// entries (entries[i] holds orders[i]), in one script.
func (w *Writer) settle(ctx context.Context, id int64, entries []string, orders []Order) error {
	args := []any{GroupName}
	for i, o := range orders {
		args = append(args, entries[i], o.No)
	}
	done, err := settle.Run(ctx, w.rdb, []string{w.q.QueueKeys(id).Queued, w.q.QueueKeys(id).Stream}, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("%w: settle %d orders: %w", inventory.ErrUnavailable, len(orders), err)
	}
	for i, n := range done {
		// Counted once, by the writer whose settle took the order out
		// of flight.
		if n == 1 && w.opts.Hooks.Confirmed != nil {
			w.opts.Hooks.Confirmed(orders[i].WrittenAt.Sub(orders[i].CreatedAt))
		}
	}
	return nil
}

// deadLetterMax bounds the dead-letter stream of one item.
const deadLetterMax = 10_000

// giveUp gives a failed order's units back to the copy, records it as
// failed in Redis and moves its entry to the dead-letter stream, once.
func (w *Writer) giveUp(ctx context.Context, id int64, entry string, o Order, reason string) error {
	k := w.q.QueueKeys(id)
	keys := []string{k.Stock, k.Queued, k.Stream, k.Dead, k.Failed}
	n, err := deadLetter.Run(ctx, w.rdb, keys, GroupName, entry, o.No, reason, deadLetterMax).Int()
	if err != nil {
		return fmt.Errorf("%w: dead-letter %s: %w", inventory.ErrUnavailable, o.No, err)
	}
	if n == 0 {
		return nil
	}
	w.opts.Logger.Warn("order failed: its units went back to the stock", "order", o.No, "item", id, "user", o.UserID, "reason", reason)
	if w.opts.Hooks.DeadLettered != nil {
		w.opts.Hooks.DeadLettered(reason)
	}
	if w.restocked != nil {
		if err := w.restocked(ctx, id); err != nil {
			w.opts.Logger.Warn("order writer: telling the fleet of returned units failed", "item", id, "err", err)
		}
	}
	return nil
}

// malformed moves an entry that is not an order to the dead-letter stream.
// It names no order the writer could trust, so nothing is given back.
func (w *Writer) malformed(ctx context.Context, id int64, m redis.XMessage, why error) error {
	w.opts.Logger.Error("order writer: malformed entry moved to the dead-letter stream", "entry", m.ID, "err", why)
	fields := map[string]any{"reason": "malformed", "entry": m.ID}
	for k, v := range m.Values {
		fields["field:"+k] = v
	}
	pipe := w.rdb.TxPipeline()
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: w.q.QueueKeys(id).Dead, MaxLen: deadLetterMax, Approx: true, Values: fields})
	pipe.XAck(ctx, w.q.QueueKeys(id).Stream, GroupName, m.ID)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	}
	if w.opts.Hooks.DeadLettered != nil {
		w.opts.Hooks.DeadLettered("malformed")
	}
	return nil
}

// deliveries reads how often an entry was delivered.
func (w *Writer) deliveries(ctx context.Context, id int64, entry string) (int64, error) {
	p, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: w.q.QueueKeys(id).Stream, Group: GroupName, Start: entry, End: entry, Count: 1}).Result()
	if err != nil || len(p) == 0 {
		return 0, err
	}
	return p[0].RetryCount, nil
}

// trim drops the entries every writer has acknowledged: those before both
// the oldest entry still pending and the group's last delivered entry. An
// entry not yet delivered is after the latter, so no trim can lose one.
func (w *Writer) trim(ctx context.Context, stream string) error {
	groups, err := w.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return err
	}
	floor := ""
	for _, g := range groups {
		if g.Name == GroupName {
			floor = g.LastDeliveredID
		}
	}
	if floor == "" || floor == "0-0" {
		return nil
	}
	p, err := w.rdb.XPending(ctx, stream, GroupName).Result()
	if err != nil {
		return err
	}
	if p.Count > 0 && streamIDLess(p.Lower, floor) {
		floor = p.Lower
	}
	return w.rdb.XTrimMinID(ctx, stream, floor).Err()
}

// parseEntry reads an order from a stream entry.
func parseEntry(id int64, m redis.XMessage) (Order, error) {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	o := Order{No: str("no"), ItemID: id, UserID: str("user"), Stage: str("stage"), Instance: str("instance")}
	q, err1 := strconv.Atoi(str("qty"))
	at, err2 := strconv.ParseInt(str("at"), 10, 64)
	if o.No == "" || o.UserID == "" || err1 != nil || err2 != nil || q < 1 {
		return o, fmt.Errorf("%w: stream entry %s is not an order: %v", inventory.ErrInvalid, m.ID, m.Values)
	}
	if o.Stage == "" {
		o.Stage = inventory.StageRedisStream
	}
	o.Quantity, o.CreatedAt = q, time.UnixMilli(at).UTC()
	return o, nil
}

// streamIDLess compares two stream IDs ("ms-seq").
func streamIDLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || am == bm && as < bs
}

func splitID(id string) (ms, seq uint64) {
	l, r, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(l, 10, 64)
	seq, _ = strconv.ParseUint(r, 10, 64)
	return ms, seq
}
