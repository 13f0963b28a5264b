// Package inventory sells a limited stock without selling more than there is.
//
// Every purchase runs under one evolution stage (the API calls it a mode).
// The lock stages (unlocked, local-mutex, redis-lock, redlock) share one
// naive critical section in critical.go (read stock, check, write the
// computed value back) and differ only in the Guard around it, so the diff
// between two stage files is the whole lesson. db-atomic and redis-atomic
// need no lock at all; redis-stream is redis-atomic with the database write
// moved behind a queue (its writers: package orderwriter). The Redis
// stages live in package redisstage and implement the contract declared
// here (Stage and its optional hooks); the crowd control in front of the
// safe stages is package admission. lifecycle.go says what
// becomes of an order after the buy: paid, or cancelled unpaid with its
// units returned. The same stages sell coupon batches: a Store serves
// one kind of item, and the store package has one for products and one for
// coupon batches.
package inventory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Sentinel errors. The store translates driver errors into them and the HTTP
// layer maps them to problem types; compare with errors.Is.
var (
	ErrNotFound         = errors.New("not found")
	ErrSoldOut          = errors.New("sold out")
	ErrAlreadyPurchased = errors.New("already purchased")
	ErrInvalid          = errors.New("invalid request")
	ErrUnknownStage     = errors.New("unknown stage")
	// ErrLockLost means the lock guarding the critical section was lost
	// before the stock write, which the fencing token rejected; nothing was
	// written and the request may be retried.
	ErrLockLost = errors.New("lock lost before the write")
	// ErrLockTimeout means the lock could not be had within the wait bound.
	ErrLockTimeout = errors.New("timed out waiting for the lock")
	// ErrUnavailable means a backend the stage needs (Redis, a RedLock
	// quorum) could not be reached; nothing was written.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrOutcomeUnknown means a write may have committed although its
	// caller cannot tell: the connection broke after the COMMIT was sent.
	// As after a deadline, what happened is in the database.
	ErrOutcomeUnknown = errors.New("outcome unknown: the commit's answer was lost")
	// ErrOverloaded means the request was turned away before it did any
	// work because this instance, or a backend, had no room for it (too
	// many buyers queued for one item, no database connection free in
	// time, the database refusing connections); nothing was written and
	// the buyer may retry.
	ErrOverloaded = errors.New("overloaded")
	// ErrRestockIncomplete means a reset, a session or a replace committed
	// the new stock in the database, but reloading a stage's copy of it
	// or telling the fleet (the reset hooks) then failed: the write
	// stands, and the same request again writes the same and reloads.
	ErrRestockIncomplete = errors.New("the new stock is written, but not every copy or instance has it")
)

// Unsettled is a write whose caller stopped waiting for it while it was
// still on its way: a COMMIT with no answer by the request's deadline,
// which goes on in the background, or one whose connection broke with it
// on its way to MySQL. Either may yet land. Its error wraps
// ErrOutcomeUnknown. A caller that holds a lock around the write must keep
// the lock until Settled is closed (the write landed or failed): a lock
// given up earlier lets the next holder read the stock the late write is
// about to change, and both sales then count the same unit.
type Unsettled struct {
	err     error
	settled <-chan struct{}
}

// NewUnsettled returns err (which should wrap ErrOutcomeUnknown) as the
// error of a write that settles when settled is closed.
func NewUnsettled(err error, settled <-chan struct{}) error {
	return &Unsettled{err: err, settled: settled}
}

func (u *Unsettled) Error() string { return u.err.Error() }
func (u *Unsettled) Unwrap() error { return u.err }

// Settled is closed once the write has landed or failed. Where the
// client's call returning does not tell (a COMMIT whose connection broke
// on its way to MySQL), the store closes it only once the transaction has
// ended on the server (store.Ledger.WriteComputed), or once the store is
// closed.
func (u *Unsettled) Settled() <-chan struct{} { return u.settled }

// settling returns the channel that closes when err's write settles, or
// nil when err is not one that may still land (see Unsettled).
func settling(err error) <-chan struct{} {
	var u *Unsettled
	if errors.As(err, &u) {
		return u.settled
	}
	return nil
}

// ErrRememberedSoldOut is the crowd control's answer from memory: one
// value, since the post-sale crowd hears it by the thousand a second. It
// matches ErrSoldOut.
var ErrRememberedSoldOut = fmt.Errorf("%w (remembered on this instance)", ErrSoldOut)

// ErrMayReturn marks a sell-out that may not last: units are reserved by
// buys still in flight and may be given back (see redis-atomic). The
// crowd control never remembers it.
var ErrMayReturn = errors.New("reserved units may still be given back")

// Transient reports whether a failed write may succeed later unchanged:
// the backend was unreachable or busy, its answer was lost, or the call
// ran out of time.
func Transient(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOverloaded) || errors.Is(err, ErrOutcomeUnknown) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// MaxQuantity bounds one purchase.
const MaxQuantity = 10

// MaxUserID bounds the length of a user id, in characters.
const MaxUserID = 64

// Item is a product, or a coupon batch: something with a limited stock.
type Item struct {
	ID           int64
	Name         string
	PriceCents   int64
	InitialStock int
	Stock        int
	FenceToken   int64
	// Window is when the item is on sale; the zero window is always open.
	Window SaleWindow
}

// Order is one purchase (for coupons: one grab). A buy returns it
// confirmed (written to the database), or pending when the stage only
// queued it (redis-stream); see lifecycle.go for what becomes of it.
type Order struct {
	No        string
	ItemID    int64
	UserID    string
	Quantity  int
	Stage     string
	Instance  string
	CreatedAt time.Time // when the buy was accepted
	Status    string    // StatusPending, StatusConfirmed, ...
	// WrittenAt is when the order reached the database; zero while
	// pending. For redis-stream, WrittenAt - CreatedAt is the time to
	// confirm.
	WrittenAt time.Time
	// Reason says why a failed order failed.
	Reason string
}

// Audit compares what was sold with what left the stock. Only live orders
// (confirmed or paid) hold stock: a cancelled order gave its units back,
// and a failed one never took any. Orders accepted by redis-stream and not
// yet written are pending: their units have left the Redis copy but not
// yet the database stock, so the database conserves its stock without
// them at every moment.
type Audit struct {
	ItemID          int64
	InitialStock    int
	Stock           int
	Sold            int // units in live orders
	Orders          int // live orders
	Paid            int // units in paid orders (part of Sold)
	Cancelled       int // units in cancelled orders, back in stock
	CancelledOrders int
	Failed          int // orders written as failed
	PendingOrders   int // accepted by redis-stream, not yet written
	Pending         int // units in pending orders
}

// Oversold is how many units were sold beyond the initial stock.
func (a Audit) Oversold() int { return max(0, a.Sold-a.InitialStock) }

// Conserved reports whether every unit that left the stock is in a live
// order and no live order holds a unit that never left: initial stock =
// stock + units in confirmed and paid orders.
func (a Audit) Conserved() bool { return a.InitialStock-a.Stock == a.Sold }

// The persistence each consumer needs, for one kind of item. The store
// package's Ledger has all of them (for products, and for coupon batches).

// Catalog is what a Service reads and resets.
type Catalog interface {
	List(ctx context.Context) ([]Item, error)
	// Get returns ErrNotFound for an unknown id.
	Get(ctx context.Context, id int64) (Item, error)
	Audit(ctx context.Context, id int64) (Audit, error)
	// Reset deletes the item's orders and sets initial stock and stock to n.
	Reset(ctx context.Context, id int64, n int) error
	// FindOrder returns the written order with this number, whatever its
	// status, or ErrOrderNotFound.
	FindOrder(ctx context.Context, no string) (Order, error)
}

// SectionStore is what the lock stages' read-check-write needs.
type SectionStore interface {
	// ReadStock reads the current stock outside any transaction.
	ReadStock(ctx context.Context, id int64) (int, error)
	// Fence records token as the item's fencing token, and fails with
	// ErrLockLost when a holder with a newer token already did.
	Fence(ctx context.Context, id int64, token int64) error
	// WriteComputed inserts o and sets the stock to newStock in one
	// transaction: the naive write. With token > 0 the write only happens if
	// the item's fencing token is still token (ErrLockLost otherwise).
	WriteComputed(ctx context.Context, o Order, newStock int, token int64) error
}

// FenceReader is a SectionStore that can claim an item for a holder and
// read its stock in one round trip. The lock stages use it when they fence.
type FenceReader interface {
	// FenceAndRead is Fence, then ReadStock, with Fence's answers: it fails
	// with ErrLockLost when the same or a newer token is recorded (two
	// holders can carry one token after a failover re-issued it).
	FenceAndRead(ctx context.Context, id int64, token int64) (int, error)
}

// Deducter is what the lock-free stages write with.
type Deducter interface {
	// Deduct inserts o and decrements the stock by o.Quantity only if enough
	// is left, in one transaction (ErrSoldOut otherwise).
	Deduct(ctx context.Context, o Order) error
}

// Store is all of the above: what the store package provides per kind of
// item, and what a composition root hands to every stage.
type Store interface {
	Catalog
	SectionStore
	Deducter
}

// Stage is one evolution stage: a way to sell without (or with) overselling.
type Stage interface {
	Buy(ctx context.Context, o Order) error
}

// The optional hooks of the stage contract: what a stage may tell the
// crowd control in front of it, or be handed by the Idempotency-Key claim.

// LastUnitSeller is a stage that says when a buy took an item's last unit
// (the lock stages): the crowd control then remembers the sell-out at
// once, so the buyers still in line hear it without a turn at the lock.
type LastUnitSeller interface {
	// BuyLast is Buy that also returns, when the buy took the item's last
	// unit, the sell-out the next buyer would hear (see SoldOutAt); nil
	// otherwise.
	BuyLast(ctx context.Context, o Order) (soldOut error, err error)
}

// FoldedBuyer is a stage that can finish a buy whose units the
// Idempotency-Key claim already took, in its own script (f.Holds(o)):
// the buy then only writes (see Fold).
type FoldedBuyer interface {
	BuyFolded(ctx context.Context, o Order, f *Fold) error
}

// Request is what a buyer asks for.
type Request struct {
	ItemID   int64
	UserID   string
	Quantity int
}

// Validate checks the request against the domain's bounds.
func (r Request) Validate() error {
	n := utf8.RuneCountInString(r.UserID)
	switch {
	case r.ItemID <= 0:
		return fmt.Errorf("%w: id must be a positive integer", ErrInvalid)
	case n < 1 || n > MaxUserID:
		return fmt.Errorf("%w: user_id must be 1 to %d characters", ErrInvalid, MaxUserID)
	case !utf8.ValidString(r.UserID) || hasControl(r.UserID):
		return fmt.Errorf("%w: user_id must be printable text", ErrInvalid)
	case r.Quantity < 1 || r.Quantity > MaxQuantity:
		return fmt.Errorf("%w: quantity must be between 1 and %d", ErrInvalid, MaxQuantity)
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// Service sells the items of one Catalog under named stages.
type Service struct {
	store    Catalog
	stages   map[string]Stage
	instance string
	prefix   string   // order number prefix: "O" for orders, "C" for coupon grabs
	crowd    Restocks // nil: no crowd control
	life     Lifecycle
	onReset  []func(ctx context.Context, id int64) error
	onBuy    func(id int64)
	// giveBacks are the stages whose logs GivenBack reads.
	giveBacks []GiveBackLog
}

// NewService returns a Service over store. stages maps each stage name to
// its implementation; instance is recorded on every order.
func NewService(store Catalog, stages map[string]Stage, instance, orderPrefix string) *Service {
	return &Service{store: store, stages: stages, instance: instance, prefix: orderPrefix}
}

// Restocks is the crowd control in front of a Service's safe stages
// (package admission), as the Service tells it that units came back.
type Restocks interface {
	// Restocked tells every instance that units came back to item id, so
	// that none answers it sold out from memory any more.
	Restocked(ctx context.Context, id int64) error
	// Reopened is Restocked for a reset: it also waits until no instance
	// can answer the item sold out from memory.
	Reopened(ctx context.Context, id int64) error
}

// WithCrowd makes Reset tell c that stock came back, so that every instance
// stops answering the item from memory. Wrap the safe stages with the same
// c. It returns s.
func (s *Service) WithCrowd(c Restocks) *Service {
	s.crowd = c // the payment timeout restocks too (lifecycle.go)
	return s.OnReset(c.Reopened)
}

// OnReset makes Reset call f once the item's new stock is in place (and
// fail with its error). It returns s.
func (s *Service) OnReset(f func(ctx context.Context, id int64) error) *Service {
	s.onReset = append(s.onReset, f)
	return s
}

// OnBuy makes every buy that reaches a stage call f with its item, after
// the stage answered, and with the item of every order the payment
// timeout cancels (the reconcile job's activity, which it checks). f
// must be cheap and must not block. It returns s.
func (s *Service) OnBuy(f func(id int64)) *Service {
	s.onBuy = f
	return s
}

// Stages lists the names of the stages this service can run, in teaching
// order.
func (s *Service) Stages() []string {
	names := make([]string, 0, len(s.stages))
	for _, n := range Stages {
		if _, ok := s.stages[n]; ok {
			names = append(names, n)
		}
	}
	return names
}

// FromMemory answers a buy of item id under the named stage from this
// instance's memory alone, before its request is even read, with no round
// trip: ErrSaleNotOpen or ErrSaleClosed (wrapped) when the stage
// remembers the item outside its sale window, an error matching
// ErrSoldOut when it remembers it sold out for any quantity; nil when the
// buy must run. The post-sale crowd (and the early one) is answered here.
func (s *Service) FromMemory(ctx context.Context, stage string, id int64) error {
	count, err := s.PeekMemory(ctx, stage, id)
	if err != nil {
		count()
	}
	return err
}

// PeekMemory is FromMemory for a buy that may not take the answer: a keyed
// one, which hears it only if its key was never used (a used key is
// replayed). count counts the answer in the refusals by reason (see
// admission.CrowdOptions.Refused); call it only when the buy is answered so.
func (s *Service) PeekMemory(ctx context.Context, stage string, id int64) (count func(), err error) {
	m, ok := s.stages[stage].(Remembers)
	if !ok {
		return func() {}, nil
	}
	reason, err := m.FromMemory(ctx, id)
	return func() { m.RefusedFor(reason) }, err
}

// Remembers is a stage behind a crowd control with a memory (package
// admission): it can answer a buy from what this instance remembers.
type Remembers interface {
	// FromMemory answers a buy of item id from memory alone, with the
	// answer's reason among the refusals; nil when the buy must run.
	FromMemory(ctx context.Context, id int64) (reason string, err error)
	// RefusedFor counts a refusal FromMemory answered.
	RefusedFor(reason string)
}

// HasStage reports whether the service can run the named stage.
func (s *Service) HasStage(name string) bool { _, ok := s.stages[name]; return ok }

// Buy sells req under the named stage and returns the order. It returns
// ErrInvalid, ErrUnknownStage, ErrNotFound, ErrSoldOut, ErrAlreadyPurchased,
// ErrLockLost, ErrLockTimeout or ErrUnavailable (wrapped), or another error
// from the store.
func (s *Service) Buy(ctx context.Context, stage string, req Request) (Order, error) {
	return s.BuyFolded(ctx, stage, req, nil)
}

// BuyFolded is Buy for a buy whose Idempotency-Key claim ran f (nil: none):
// when the claim took the units, the order is the one it took them for,
// and the stage only writes it (FoldedBuyer).
func (s *Service) BuyFolded(ctx context.Context, stage string, req Request, f *Fold) (Order, error) {
	if err := req.Validate(); err != nil {
		return Order{}, err
	}
	st, ok := s.stages[stage]
	if !ok {
		return Order{}, fmt.Errorf("%w: %q", ErrUnknownStage, stage)
	}
	o := s.newOrder(st, stage, req)
	if f != nil && f.order.Stage == stage && f.order.ItemID == req.ItemID &&
		f.order.UserID == req.UserID && f.order.Quantity == req.Quantity {
		o = f.order // the order its claim took the units for
	}
	err := buy(ctx, st, o, f)
	if s.onBuy != nil && !errors.Is(err, ErrRememberedSoldOut) {
		s.onBuy(req.ItemID)
	}
	if err != nil {
		prev, ok, qerr := s.earlierOrder(ctx, st, req, err)
		if ok {
			return prev, nil
		}
		if qerr != nil {
			err = qerr // the earlier order is there, but not yet what its 202 must promise
		}
		if errors.Is(err, ErrRememberedSoldOut) {
			return Order{}, err // the post-sale crowd's answer: no wrapping per buyer
		}
		return Order{}, fmt.Errorf("%s item %d: %w", stage, req.ItemID, err)
	}
	return o, nil
}

// buy runs o's buy under st, as the rest of a folded buy when f holds o
// or its gates were passed before the claim (Fold.Gated).
func buy(ctx context.Context, st Stage, o Order, f *Fold) error {
	gated, _ := f.Gated(o)
	if fb, ok := st.(FoldedBuyer); ok && (gated || f.Holds(o)) {
		return fb.BuyFolded(ctx, o, f)
	}
	return st.Buy(ctx, o)
}

// newOrder is the order a buy of req under stage st makes.
func (s *Service) newOrder(st Stage, stage string, req Request) Order {
	o := Order{
		No:        s.newOrderNo(),
		ItemID:    req.ItemID,
		UserID:    req.UserID,
		Quantity:  req.Quantity,
		Stage:     stage,
		Instance:  s.instance,
		CreatedAt: s.now().UTC(),
		Status:    StatusConfirmed,
	}
	if q, ok := st.(Queuer); ok && q.Queues() {
		o.Status = StatusPending
	} else {
		// A synchronous stage writes the order before it answers: its
		// time to confirm is part of the buy's latency, not after it.
		o.WrittenAt = o.CreatedAt
	}
	return o
}

// clientAddrKey marks a context with the address of the client a buy came
// from (see WithClientAddr).
type clientAddrKey struct{}

// WithClientAddr marks ctx with the address of the buy's client, as the
// HTTP layer knows it, for limits per address (admission.CrowdOptions.Admit).
func WithClientAddr(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, clientAddrKey{}, addr)
}

// ClientAddr is the address WithClientAddr put in ctx, or "".
func ClientAddr(ctx context.Context) string { v, _ := ctx.Value(clientAddrKey{}).(string); return v }

// retryKey marks a context as the retry of a request whose outcome was
// never told (see WithRetry).
type retryKey struct{}

// WithRetry marks ctx as the retry of a buy whose earlier run may have
// bought without its buyer hearing so: a crash between the commit and the
// answer, or a timeout. The HTTP layer knows it from the Idempotency-Key
// record. Such a retry that is refused as sold out or as a repeat buyer
// gets the buyer's order instead, as the lost answer would have said.
func WithRetry(ctx context.Context) context.Context { return context.WithValue(ctx, retryKey{}, true) }

func isRetry(ctx context.Context) bool { v, _ := ctx.Value(retryKey{}).(bool); return v }

// BuyerOrders is a store that finds the order a buyer holds for an item.
type BuyerOrders interface {
	OrderOf(ctx context.Context, id int64, user string) (Order, error)
}

// QueuedOrders is a stage that finds an order it accepted and has not
// written yet (redis-stream).
type QueuedOrders interface {
	QueuedOrderOf(ctx context.Context, id int64, user string) (Order, bool, error)
}

// earlierOrder, for a retry refused with err, returns the live order the
// buyer already holds for the item: in the database, or still queued by
// st. The lock stages and db-atomic check the stock before they check for
// a repeat buyer (the sold-out memory does not even read the database),
// and redis-stream's script refuses a buyer whose order is queued, so
// without this a buyer whose answer was lost would be told "sold out" or
// "already purchased" instead of the order it has. Only retries pay for
// the reads.
//
// A queued order the stage cannot yet vouch for (its durability does not
// hold: ErrOutcomeUnknown) is not returned; that error is, for the buyer
// to retry again. So is a refusal as a repeat buyer when no order of the
// buyer's is found at all.
func (s *Service) earlierOrder(ctx context.Context, st Stage, req Request, err error) (Order, bool, error) {
	if !isRetry(ctx) || !(errors.Is(err, ErrSoldOut) || errors.Is(err, ErrAlreadyPurchased)) {
		return Order{}, false, nil
	}
	var prev Order
	found := false
	if bo, ok := s.store.(BuyerOrders); ok {
		o, ferr := bo.OrderOf(ctx, req.ItemID, req.UserID)
		prev, found = o, ferr == nil
	}
	if qo, ok := st.(QueuedOrders); ok && !found {
		o, ok, qerr := qo.QueuedOrderOf(ctx, req.ItemID, req.UserID)
		if errors.Is(qerr, ErrOutcomeUnknown) {
			return Order{}, false, qerr
		}
		prev, found = o, ok && qerr == nil
	}
	if !found && errors.Is(err, ErrAlreadyPurchased) {
		// The stage lists the buyer (a unit reserved for it in Redis) and
		// no order exists: the earlier run's reservation, whose order is
		// on its way or will never be written (a claim whose reply was
		// lost: the reconcile job gives its unit back). "Already
		// purchased" would tell of an order the buyer may never have;
		// the retry after that finds the order, or buys.
		return Order{}, false, fmt.Errorf("%w: the stage holds a unit for the buyer, and no order of theirs was found (%v)", ErrOutcomeUnknown, err)
	}
	// Only the buyer's own order: a database whose user_id column still
	// has a case- and accent-blind collation (one 004_exact_user_ids.sql
	// has not reached) finds alice's order for "ALICE".
	if !found || prev.UserID != req.UserID || prev.Quantity != req.Quantity {
		return Order{}, false, nil
	}
	switch prev.Status {
	case StatusConfirmed, StatusPaid, StatusPending:
		return prev, true, nil
	}
	return Order{}, false, nil
}

// Queuer is implemented by a stage whose Buy only accepts the order: it is
// written later, so the buyer gets it pending (202), not confirmed (201).
type Queuer interface {
	Queues() bool
}

// List returns every item.
func (s *Service) List(ctx context.Context) ([]Item, error) { return s.store.List(ctx) }

// Get returns one item or ErrNotFound.
func (s *Service) Get(ctx context.Context, id int64) (Item, error) { return s.store.Get(ctx, id) }

// Audit returns the conservation audit of one item or ErrNotFound. With a
// queue (redis-stream), it also counts the orders accepted and not yet
// written, or fails with ErrUnavailable when Redis cannot say.
//
// The queue is read before the database: a writer commits an order's row
// before it takes the order off the queue, so an order settled between
// the two reads is counted twice (pending and written), never not at all,
// and an audit with no order pending has every accepted order in its
// database counts.
func (s *Service) Audit(ctx context.Context, id int64) (Audit, error) {
	if s.life.Queue == nil {
		return s.store.Audit(ctx, id)
	}
	orders, units, err := s.life.Queue.Backlog(ctx, id)
	if err != nil {
		return Audit{}, err
	}
	a, err := s.store.Audit(ctx, id)
	a.PendingOrders, a.Pending = orders, units
	return a, err
}

// Reset deletes an item's orders and restocks it with n units, on sale at
// once and for good (no window). It returns ErrInvalid for a negative n and
// ErrNotFound for an unknown item. Stages that keep their own copy of the
// stock (redis-atomic) reload it: see Resetter.
func (s *Service) Reset(ctx context.Context, id int64, n int) error {
	return s.ResetSale(ctx, id, n, SaleWindow{})
}

// ResetSale is Reset that also sets when the item is on sale. It returns
// ErrInvalid for a window that closes before it opens, or for a window on
// a catalog that keeps none.
func (s *Service) ResetSale(ctx context.Context, id int64, n int, w SaleWindow) error {
	if n < 0 || n > 1_000_000_000 {
		return fmt.Errorf("%w: stock must be between 0 and 1000000000", ErrInvalid)
	}
	if err := w.Validate(); err != nil {
		return err
	}
	ws, windows := s.store.(WindowSetter)
	if !windows && w != (SaleWindow{}) {
		return fmt.Errorf("%w: this catalog keeps no sale windows", ErrInvalid)
	}
	if s.life.Queue != nil {
		// Orders accepted before the reset are written before it, so
		// none lands in the new stock (see RedisStream.Reset).
		s.life.Queue.Drain(ctx, id)
	}
	reset := func() error { return s.store.Reset(ctx, id, n) }
	if windows {
		reset = func() error { return ws.ResetSale(ctx, id, n, w) }
	}
	if err := reset(); err != nil {
		return err
	}
	// Committed: the copies are reloaded, and then the reset hooks run
	// (only once the new stock is in place may instances forget that the
	// item was sold out), even if the request ends meanwhile (restocked).
	return s.restocked(ctx, []int64{id}, func(ctx context.Context, r Resetter, id int64) error { return r.Reset(ctx, id, n) })
}

// Resetter is implemented by stages that keep state per item (such as a
// Redis copy of the stock) and must hear about a reset.
type Resetter interface {
	Reset(ctx context.Context, id int64, n int) error
}

// newOrderNo returns a unique, roughly time-ordered order number.
func (s *Service) newOrderNo() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	no := make([]byte, 0, len(s.prefix)+14+2*len(b))
	no = time.Now().UTC().AppendFormat(append(no, s.prefix...), "20060102150405")
	return string(hex.AppendEncode(no, b[:]))
}
