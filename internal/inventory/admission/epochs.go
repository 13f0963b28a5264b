package admission

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// RedisEpochs keeps the fleet's restock epochs (Epochs) in Redis:
// one key per item holding a random value, replaced on every restock. A
// key that is missing (first use, or a Redis that lost its data) gets a
// new value, so memory never outlives the data it was checked against.
//
// Each instance remembers the epochs it read, so that a buyer of a sold-out
// item is answered from memory with no round trip at all. A remembered
// epoch is trusted only
//   - while this instance is subscribed to epochChannel, where every bump
//     is announced (a bump drops the item's epoch on every instance that
//     hears it; losing the subscription drops them all), and
//   - for at most lease after the read that found it began.
//
// The lease is what makes a reset safe when an announcement is late or
// lost (an instance paused, a subscription dead but not yet noticed): Settle
// waits out the lease after a bump, so once a reset returns no instance can
// still trust the epoch from before it.
//
// An epoch read carries the session it was read in (see Epoch), and the
// session changes whenever rdb dials a connection as well as with the
// subscription: a Redis that restarted (perhaps from a snapshot older than
// the last bump) or a replica promoted in its place is reached only on a
// connection dialled after, so the first read from it already differs from
// every read before, even when the watcher has not yet noticed that the
// subscription is gone.
type RedisEpochs struct {
	rdb   redis.UniversalClient // reads and bumps
	sub   redis.UniversalClient // the subscription (the same client in production)
	lease time.Duration
	reads singleflight.Group                         // one read of an item's epoch at a time
	now   func() time.Time                           // time.Now; tests move it
	pause func(ctx context.Context, d time.Duration) // between subscriptions (epochs_watch.go)

	mu      sync.Mutex
	live    bool   // subscribed: remembered epochs may be trusted
	gen     uint64 // changes whenever remembered epochs are dropped
	session uint64 // changes whenever the subscription starts or ends, and on every dial
	known   map[string]knownEpoch
	bumped  map[string]time.Time // when this instance last bumped each item
	// counted are the nodes of a Cluster rdb whose dials change the
	// session (see countDials).
	counted map[*redis.Client]bool
	// soldOutTo hear the sell-outs announced (epochs_soldout.go).
	soldOutTo []func(item, stage, epoch string, qty int)
	// heard, set by tests only, runs after each sell-out message, with
	// whether it was passed on.
	heard func(payload string, applied bool)
	// compared, set by tests only, runs in heardSoldOut after a sell-out
	// message's epoch was compared with the trusted one, before it is
	// passed on.
	compared func()
}

type knownEpoch struct {
	value  string    // as Epoch returns it: the stored value and the session
	readAt time.Time // when the read that found it began
}

// epochChannel carries the name of every item whose epoch changed.
const epochChannel = "seckill:epochs"

// EpochKey names item's epoch key in Redis.
func EpochKey(item string) string { return "seckill:epoch:{" + item + "}" }

// NewRedisEpochs returns the epochs kept on rdb, announced on sub (the
// same client in production), each remembered for at most lease. Run
// Watch for its subscription: until it is up, every read goes to Redis.
func NewRedisEpochs(rdb, sub redis.UniversalClient, lease time.Duration) *RedisEpochs {
	e := &RedisEpochs{rdb: rdb, sub: sub, lease: lease, now: time.Now, pause: pause, known: map[string]knownEpoch{}, bumped: map[string]time.Time{},
		counted: map[*redis.Client]bool{}}
	if c, ok := rdb.(*redis.ClusterClient); ok {
		// A Cluster dials through its nodes' clients: each is counted
		// when made, or, for those made before, before the first read
		// it serves (countDials).
		c.OnNewNode(e.count)
	} else {
		rdb.AddHook(dialCounter{e})
	}
	return e
}

// dialCounter changes the session of its epochs on every dial.
type dialCounter struct{ e *RedisEpochs }

func (h dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.e.mu.Lock()
		h.e.session++
		h.e.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// count makes the dials of a Cluster node's client change the session,
// once per client.
func (e *RedisEpochs) count(node *redis.Client) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.counted[node] {
		e.counted[node] = true
		node.AddHook(dialCounter{e})
	}
}

// countDials makes sure, on a Cluster, that the node serving item's epoch
// counts its dials before the read: a connection it dialled earlier
// reached the node as it was before this read, whose reads were counted
// from then on, so a restart since then is still seen.
func (e *RedisEpochs) countDials(ctx context.Context, item string) error {
	c, ok := e.rdb.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	node, err := c.MasterForKey(ctx, EpochKey(item))
	if err != nil {
		return err
	}
	e.count(node)
	return nil
}

// Epoch returns the item's epoch: from memory while it can be trusted,
// else from Redis, one read at a time per item. The value carries the
// session it was read in, so a sell-out remembered under it (Crowd) ends
// with the subscription, and with the connections, too: a Redis that
// restarts from a snapshot may bring an old epoch back, and sell-outs
// remembered under it must not count again.
func (e *RedisEpochs) Epoch(ctx context.Context, item string) (string, error) {
	e.mu.Lock()
	k, ok := e.known[item]
	ok = ok && e.live && e.now().Sub(k.readAt) < e.lease
	e.mu.Unlock()
	if ok {
		return k.value, nil
	}
	got, err, _ := e.reads.Do(item, func() (any, error) { return e.read(ctx, item) })
	if err != nil {
		return "", err
	}
	k = got.(knownEpoch)
	// A read shared with others may have begun long ago (a slow Redis):
	// the lease bounds its value for every caller, not only for memory.
	if e.now().Sub(k.readAt) >= e.lease {
		return "", fmt.Errorf("epoch of %s: the read took longer than the %v lease", item, e.lease)
	}
	return k.value, nil
}

// read fetches the item's epoch from Redis and remembers it, unless the
// memory was dropped while the read was under way (its value may be from
// before the drop's bump).
func (e *RedisEpochs) read(ctx context.Context, item string) (knownEpoch, error) {
	e.mu.Lock()
	live, gen := e.live, e.gen
	e.mu.Unlock()
	k := knownEpoch{readAt: e.now()}
	if err := e.countDials(ctx, item); err != nil {
		return knownEpoch{}, err
	}
	v, err := e.rdb.Get(ctx, EpochKey(item)).Result()
	if errors.Is(err, redis.Nil) {
		// First use: agree on one value with the other instances.
		if err = e.rdb.SetNX(ctx, EpochKey(item), randomToken(), 0).Err(); err == nil {
			v, err = e.rdb.Get(ctx, EpochKey(item)).Result()
		}
	}
	if err != nil {
		return knownEpoch{}, err
	}
	// The session as it is after the read: a connection dialled for it
	// changed the session before the read was sent.
	e.mu.Lock()
	k.value = v + "/" + strconv.FormatUint(e.session, 10)
	if live && e.live && e.gen == gen {
		e.known[item] = k
	}
	e.mu.Unlock()
	return k, nil
}

// Bump gives the item a new epoch and announces it to every instance.
func (e *RedisEpochs) Bump(ctx context.Context, item string) error {
	if err := e.rdb.Set(ctx, EpochKey(item), randomToken(), 0).Err(); err != nil {
		return err
	}
	e.mu.Lock()
	e.bumped[item] = e.now()
	delete(e.known, item)
	e.gen++
	e.mu.Unlock()
	return e.rdb.Publish(ctx, epochChannel, item).Err()
}

// Settle returns once no instance can trust an epoch of the item from
// before this instance's last Bump of it: a lease after the bump, or when
// ctx ends (with its error).
func (e *RedisEpochs) Settle(ctx context.Context, item string) error {
	e.mu.Lock()
	at, ok := e.bumped[item]
	e.mu.Unlock()
	if !ok {
		return nil
	}
	wait := e.lease - e.now().Sub(at)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting out the %v lease of %s's epoch: %w", e.lease, item, ctx.Err())
	}
}

// drop forgets every remembered epoch; live says whether new ones may be
// remembered from now on.
func (e *RedisEpochs) drop(live bool) {
	e.mu.Lock()
	clear(e.known)
	e.gen++
	e.session++
	e.live = live
	e.mu.Unlock()
}

// DropStale forgets the epochs read a lease ago or more, which no buyer
// may trust any longer, and the bumps a lease old, which no Settle waits
// for: what an instance keeps of its items' epochs is then bounded by the
// items bought in the last lease, not by every item ever bought. No
// Redis command.
func (e *RedisEpochs) DropStale() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for item, k := range e.known {
		if now.Sub(k.readAt) >= e.lease {
			delete(e.known, item)
		}
	}
	for item, at := range e.bumped {
		if now.Sub(at) >= e.lease {
			delete(e.bumped, item)
		}
	}
}

// Subscribed reports whether the subscription is up, so that remembered
// epochs are trusted.
func (e *RedisEpochs) Subscribed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.live
}

// randomToken returns a fresh epoch value: 128 random bits in hex.
func randomToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}
