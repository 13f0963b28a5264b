package redisstage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durability is what redis-stream's 202 promises about the queued order.
// Redis answers a write once it is in memory; by default nothing more.
type Durability string

const (
	// DurabilityNone answers 202 once the primary holds the order in
	// memory: a crash of Redis (without AOF) or a failover to a replica
	// that had not received it loses an accepted order.
	DurabilityNone Durability = "none"
	// DurabilityFsync needs Redis to run with appendonly yes and
	// appendfsync always: Redis then answers the script only after its
	// write is in the append-only file on disk, so a restart from that
	// file keeps every accepted order. It says nothing about a failover.
	DurabilityFsync Durability = "fsync"
	// DurabilityReplica answers 202 only after WAIT, sent on the same
	// connection right behind the script, counted a replica that has the
	// order. A failover to that replica keeps it; WAIT is not consensus,
	// so with several replicas Sentinel may still promote one that had
	// not. An order no replica confirms within StreamOptions.ReplicaWait
	// is queued but answered as an unknown outcome (ErrOutcomeUnknown).
	DurabilityReplica Durability = "replica"
)

// Durabilities lists the levels, weakest first.
var Durabilities = []string{string(DurabilityNone), string(DurabilityFsync), string(DurabilityReplica)}

// ErrNotDurable means Redis is not set up for the durability asked of
// redis-stream: the app must not start and promise what Redis does not
// keep.
var ErrNotDurable = errors.New("redis cannot keep the durability asked for")

// enqueue runs the enqueue script; at DurabilityReplica it pipelines WAIT
// behind it on the same connection (WAIT counts the replicas that
// acknowledged that connection's writes) and returns how many confirmed.
func (s *RedisStream) enqueue(ctx context.Context, keys []string, args []any) (left int64, ms time.Duration, replicas int64, err error) {
	if s.opts.Durability != DurabilityReplica {
		left, ms, err = scriptAnswer(enqueue.Run(ctx, s.rdb, keys, args...).Result())
		return left, ms, 0, err
	}
	left, ms, replicas, err = s.enqueueAndWait(ctx, enqueue.EvalSha, keys, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The server does not have the script yet (a restart, a new
		// primary): send it whole this once; later calls find it cached.
		left, ms, replicas, err = s.enqueueAndWait(ctx, enqueue.Eval, keys, args)
	}
	return left, ms, replicas, err
}

func (s *RedisStream) enqueueAndWait(ctx context.Context, run func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd, keys []string, args []any) (int64, time.Duration, int64, error) {
	pipe := s.rdb.Pipeline()
	res := run(ctx, pipe, keys, args...)
	wait := pipe.Do(ctx, "WAIT", 1, s.opts.ReplicaWait.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil && res.Err() != nil {
		return 0, 0, 0, res.Err()
	}
	left, ms, err := scriptAnswer(res.Result())
	if err != nil {
		return 0, 0, 0, err
	}
	if left < 0 {
		return left, ms, 0, nil // refused: nothing to confirm
	}
	n, err := wait.Int64()
	if err != nil {
		// The script ran and queued the order; whether a replica has it
		// is unknown.
		return left, ms, 0, nil
	}
	return left, ms, n, nil
}

// CheckDurability checks at start that Redis can keep the promise of the
// stage's durability. DurabilityFsync needs appendonly yes and appendfsync
// always on every primary (CONFIG GET); DurabilityReplica needs one
// connection per buy to carry the script and its WAIT, which a Cluster
// client splits by slot, and a server that knows WAIT. It fails with
// ErrNotDurable (or the error that kept Redis from answering).
func (s *RedisStream) CheckDurability(ctx context.Context) error {
	switch s.opts.Durability {
	case DurabilityNone:
		return nil
	case DurabilityFsync:
		check := func(ctx context.Context, c *redis.Client) error {
			cfg, err := c.ConfigGet(ctx, "append*").Result()
			if err != nil {
				return fmt.Errorf("CONFIG GET appendonly on %s: %w", c.Options().Addr, err)
			}
			if cfg["appendonly"] != "yes" || cfg["appendfsync"] != "always" {
				return fmt.Errorf("%w: fsync needs appendonly yes and appendfsync always; %s has appendonly %q, appendfsync %q",
					ErrNotDurable, c.Options().Addr, cfg["appendonly"], cfg["appendfsync"])
			}
			return nil
		}
		switch c := s.rdb.(type) {
		case *redis.Client:
			return check(ctx, c)
		case *redis.ClusterClient:
			return c.ForEachMaster(ctx, check)
		}
		return fmt.Errorf("%w: cannot read the configuration of a %T", ErrNotDurable, s.rdb)
	case DurabilityReplica:
		c, ok := s.rdb.(*redis.Client)
		if !ok {
			return fmt.Errorf("%w: replica needs one server or a Sentinel group, not a %T: WAIT must follow the script on its connection", ErrNotDurable, s.rdb)
		}
		if err := c.Wait(ctx, 0, 0).Err(); err != nil {
			return fmt.Errorf("%w: WAIT: %w", ErrNotDurable, err)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown durability %q; want one of %s", ErrNotDurable, s.opts.Durability, strings.Join(Durabilities, ", "))
}

// mayHaveRun reports whether a call that failed with err may have run in
// Redis: it was sent and its reply was lost (a broken connection, a read
// timeout, a deadline mid-call). An error reply, a dial that failed, a
// wait for a pooled connection that ran out and the context's own error
// (notSent) say it was never run.
func mayHaveRun(err error) bool {
	var reply redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &reply), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed), notSent(err):
		return false
	case errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}

// notSent reports a call that failed with its context's own error
// (context.DeadlineExceeded or context.Canceled): go-redis returns it only
// before it writes the command, while it waits for a pooled connection
// or dials with a context already over. Once the command is written it
// no longer looks at the context: a deadline that falls then comes back
// as the socket's "i/o timeout" (ContextTimeoutEnabled sets the
// connection's deadlines from the context's), a cancel not at all. The
// one other place go-redis returns it, the pause before a retry, comes
// after a first try that may have run; the app's clients do not retry
// (MaxRetries -1, see cmd/seckill/redisclients.go): a retry would run a
// stage's script twice.
func notSent(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// durable fills in the durability defaults of o: none, and a wait for a
// replica of 100ms (at least 1ms: WAIT's 0 would wait for ever).
func (o StreamOptions) durable() StreamOptions {
	if o.Durability == "" {
		o.Durability = DurabilityNone
	}
	switch {
	case o.ReplicaWait <= 0:
		o.ReplicaWait = 100 * time.Millisecond
	case o.ReplicaWait < time.Millisecond:
		o.ReplicaWait = time.Millisecond
	}
	return o
}
