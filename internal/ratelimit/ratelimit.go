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
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/gcra.lua
	gcraSrc string
	//go:embed scripts/gate.lua
	gateSrc string
	// allow is one request of one key: the limiter's own round trip.
	allow = redis.NewScript(gcraSrc + "\nreturn gcra(KEYS[1], ARGV[1], ARGV[2])\n")
	// GateSrc is Lua that defines local function gate(keys, args), the
	// limit run first by another script (see Gate).
	GateSrc = gcraSrc + "\n" + gateSrc
)

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
	res, err := allow.Run(ctx, l.rdb, []string{l.opts.Prefix + key}, l.args()...).Int64Slice()
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

func (l *Limiter) args() []any {
	return []any{strconv.FormatInt(l.opts.Interval.Microseconds(), 10), strconv.Itoa(l.opts.Burst)}
}

// Gate is the limit's check of some keys as part of another script, so
// that it costs no round trip of its own: Src (GateSrc) defines local
// function gate(keys, args), which the script calls with Keys and Args
// before its own work, and which answers false when every key was
// allowed, or a refusal that Refused turns into the *Limited that Allow
// would have returned. It must run on the limiter's own Redis, and on one
// server: on a Cluster the limit's keys and the script's own are in
// different slots (use Allow there).
type Gate struct {
	Src  string
	Keys []string
	Args []any
	// keys are the limited keys, without the prefix.
	keys []string
}

// Gate returns the check of keys, in order, each counted as Allow counts
// it; the keys counted before a refused one stay counted.
func (l *Limiter) Gate(keys ...string) Gate {
	g := Gate{Src: GateSrc, Args: l.args(), keys: keys}
	for _, k := range keys {
		g.Keys = append(g.Keys, l.opts.Prefix+k)
	}
	return g
}

// Refused returns the *Limited of the gate's refusal (what gate
// answered), or a plain error for a refusal it cannot read.
func (g Gate) Refused(refusal string) error {
	i, wait, ok := strings.Cut(refusal, ":")
	n, err1 := strconv.Atoi(i)
	us, err2 := strconv.ParseInt(wait, 10, 64)
	if !ok || err1 != nil || err2 != nil || n < 1 || n > len(g.keys) || us < 0 {
		return fmt.Errorf("ratelimit: gate answered %q", refusal)
	}
	return &Limited{Key: g.keys[n-1], Wait: time.Duration(us) * time.Microsecond}
}
