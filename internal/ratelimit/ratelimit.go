// Package ratelimit limits requests per key (an account, a client address)
// across a fleet: one Redis script per request keeps each key's state, on
// the Redis clock, with the generic cell rate algorithm (GCRA). A key may
// send Burst requests at once, then one per Interval.
package ratelimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/gcra.lua
var gcraSource string

var gcra = redis.NewScript(gcraSource)

// Options configure a Limiter.
type Options struct {
	// Interval is the time between requests at the sustained rate: 100ms
	// is 10 a second.
	Interval time.Duration
	// Burst is how many requests a key may send at once; at least 1.
	Burst int
	// Prefix starts every key the limiter writes.
	Prefix string
}

// Limiter is a fleet-wide limit: every Limiter on the same Redis with the
// same Prefix and Options shares it.
type Limiter struct {
	rdb  redis.Scripter
	opts Options
}

// New returns a limiter; it refuses an Interval under a microsecond or a
// Burst under 1.
func New(rdb redis.Scripter, opts Options) (*Limiter, error) {
	if opts.Interval < time.Microsecond {
		return nil, fmt.Errorf("ratelimit: interval %s is under a microsecond", opts.Interval)
	}
	if opts.Burst < 1 {
		return nil, fmt.Errorf("ratelimit: burst %d, want at least 1", opts.Burst)
	}
	return &Limiter{rdb: rdb, opts: opts}, nil
}

// ErrLimited is what Allow returns for a request over the limit, wrapped
// in a *Limited that says when to come back.
var ErrLimited = errors.New("rate limit exceeded")

// Limited is a request refused for its key's rate.
type Limited struct {
	Key  string
	Wait time.Duration // until the key may send again
}

func (e *Limited) Error() string {
	return fmt.Sprintf("%s: %s may send again in %s", ErrLimited, e.Key, e.Wait)
}

func (e *Limited) Unwrap() error { return ErrLimited }

// RetryAfter is how long the refused client should wait.
func (e *Limited) RetryAfter() time.Duration { return e.Wait }

// Allow counts one request of key: nil when it is within the limit, a
// *Limited when it is not, another error when Redis could not say (the
// caller chooses whether to let such a request through).
func (l *Limiter) Allow(ctx context.Context, key string) error {
	res, err := gcra.Run(ctx, l.rdb, []string{l.opts.Prefix + key},
		strconv.FormatInt(l.opts.Interval.Microseconds(), 10), strconv.Itoa(l.opts.Burst)).Int64Slice()
	if err != nil {
		return fmt.Errorf("ratelimit: %w", err)
	}
	if len(res) != 2 {
		return fmt.Errorf("ratelimit: script answered %v", res)
	}
	if res[0] == 1 {
		return nil
	}
	return &Limited{Key: key, Wait: time.Duration(res[1]) * time.Microsecond}
}
