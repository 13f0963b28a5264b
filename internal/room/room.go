// Package room is the waiting room in front of a sale (issue 62): a buyer
// joins an item's room and gets a signed ticket with a place; polling it
// answers the position and the wait, then a signed single-use pass when
// the place is admitted, or "sold out" once no unit remains. A buy of an
// item with a room needs a pass.
//
// The room's state lives in Redis, under the item's hash tag (one Cluster
// slot per item), so any instance serves any ticket. The "now admitting"
// count reaches the instances by push (pub/sub) and by the admission step
// each instance runs while the room is active, so that a poll is answered
// from memory, with no round trip. docs/room.md has the design.
package room

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRoom is an item without a room.
var ErrNoRoom = errors.New("the item has no waiting room")

// ErrUnavailable is a room whose Redis could not be reached.
var ErrUnavailable = errors.New("the waiting room's Redis is unavailable")

// ErrInvalid is a room setting out of range.
var ErrInvalid = errors.New("invalid room setting")

// Settings are a room's, set by the operator.
type Settings struct {
	// Rate is the passes given per second.
	Rate int
	// MaxInside bounds the pass holders inside at once: passes given and
	// neither spent nor expired.
	MaxInside int
	// Shuffle is the opening span: buyers who join before OpensAt plus
	// Shuffle get their places by a draw, not by arrival.
	Shuffle time.Duration
	// PassTTL is how long a pass is valid from its place's admission.
	PassTTL time.Duration
	// OpensAt is the opening; zero means now.
	OpensAt time.Time
}

// DefaultPassTTL is a pass's validity when the settings leave it out.
const DefaultPassTTL = 30 * time.Second

// Check says what is wrong with s, wrapping ErrInvalid.
func (s Settings) Check() error {
	switch {
	case s.Rate < 1 || s.Rate > 100000:
		return fmt.Errorf("%w: passes_per_second must be 1 to 100000", ErrInvalid)
	case s.MaxInside < 1 || s.MaxInside > 100000:
		return fmt.Errorf("%w: max_inside must be 1 to 100000", ErrInvalid)
	case s.Shuffle < 0 || s.Shuffle > 10*time.Minute:
		return fmt.Errorf("%w: shuffle_ms must be 0 to 600000", ErrInvalid)
	case s.PassTTL < time.Second || s.PassTTL > 10*time.Minute:
		return fmt.Errorf("%w: pass_ttl_ms must be 1000 to 600000", ErrInvalid)
	}
	return nil
}

// Options configure a Manager.
type Options struct {
	RDB    redis.UniversalClient
	Signer *Signer
	// Namespace names the items' kind in the keys ("product"), as the
	// stages' keys do: seckill:{product:7}:room.
	Namespace string
	// Stock reads the units left of an item (neither sold nor reserved);
	// the admission step stops while it is 0 and starts again when units
	// come back. Nil: the room learns a sell-out only from SoldOut.
	Stock func(ctx context.Context, id int64) (int, error)
	Log   *slog.Logger
	// AckWait is how long the last sale's answer waits for the fleet to
	// acknowledge the room's sell-out (default 500ms; see Settle).
	AckWait time.Duration
	// Step is the shortest time between two admission steps of a room on
	// this instance (default 50ms); Stale is how old a room's state may
	// be before a poll reads it (default 2s); Idle is how long a room
	// nobody asked about on this instance keeps its step running
	// (default 30s).
	Step, Stale, Idle time.Duration
}

// Counts are what this instance's rooms did, for /metrics.
type Counts struct {
	Joins, Polls, Passes, Spends, Expiries int64
}

// Manager serves the rooms of one kind of item on one instance.
type Manager struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	rooms   map[int64]*view
	sweepAt int // the size of rooms at which dropIdle runs next

	subOnce                                sync.Once
	joins, polls, passes, spends, expiries atomic.Int64
	acks                                   ackWaiters
	acksMissed                             atomic.Int64 // sell-outs and removals answered before every instance acknowledged them
	// Test hooks: beforeNews runs before a piece of news is learnt (in
	// the subscription's goroutine), awaiting when a Settle or a Remove
	// starts waiting for acknowledgements, afterStep when an admission
	// step's answer is back from Redis, before it is learnt.
	beforeNews, awaiting, afterStep func()
}

// New returns a Manager; Close stops its background work.
func New(opts Options) *Manager {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Signer == nil {
		opts.Signer = RandomSigner()
	}
	if opts.Namespace == "" {
		opts.Namespace = "product"
	}
	if opts.Step <= 0 {
		opts.Step = 50 * time.Millisecond
	}
	if opts.Stale <= 0 {
		opts.Stale = 2 * time.Second
	}
	if opts.Idle <= 0 {
		opts.Idle = 30 * time.Second
	}
	if opts.AckWait <= 0 {
		opts.AckWait = 500 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{opts: opts, ctx: ctx, cancel: cancel, rooms: map[int64]*view{}, sweepAt: minSweep}
}

// Close stops the rooms' steps and the news subscription.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// Counts returns the counts so far.
func (m *Manager) Counts() Counts {
	return Counts{Joins: m.joins.Load(), Polls: m.polls.Load(), Passes: m.passes.Load(), Spends: m.spends.Load(), Expiries: m.expiries.Load()}
}

// NewsChannel is the pub/sub channel of every room's news. Plain pub/sub
// reaches every node of a Cluster, so it needs no hash tag.
const NewsChannel = "seckill:room:news"

func (m *Manager) key(id int64, name string) string {
	return fmt.Sprintf("seckill:{%s:%d}:room%s", m.opts.Namespace, id, name)
}

// keys are the room's four keys: its hash, admission steps, spent places
// and their Idempotency-Keys.
func (m *Manager) keys(id int64) []string {
	return []string{m.key(id, ""), m.key(id, ":admits"), m.key(id, ":spent"), m.key(id, ":spentkey")}
}

func (m *Manager) newsName(id int64) string {
	return m.opts.Namespace + ":" + strconv.FormatInt(id, 10)
}

// seed is a random draw seed below 2^52, exact as a Lua number.
func seed() int64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	// 46 bits: Redis's Lua turns a number into text with 14 significant
	// digits (the HSET that stores it, the news that carries it), which
	// hold any integer below 10^14 exactly and rounded a 52-bit seed, so
	// that the news of a draw was unreadable and a seed read back from
	// the hash was not the one drawn.
	return int64(binary.LittleEndian.Uint64(b[:]) >> 18)
}

// unavailable wraps a Redis error.
func unavailable(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
