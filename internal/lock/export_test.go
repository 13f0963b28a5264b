package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScriptsOnly runs one obtain and one release script on key, the Redis work
// of an uncontended Obtain and Release without the Lease around it, so the
// benchmarks can tell the scripts' cost from the client's.
func (c *Client) ScriptsOnly(ctx context.Context, key string, ttl time.Duration) error {
	n := newNames(c.opts.Prefix, key)
	cl := ObtainOptions{}.claim()
	ok, token, err := c.try(ctx, n, cl, false, ttl, "")
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("lock: ScriptsOnly: key is held")
	}
	return c.release(ctx, n, cl, strconv.FormatInt(token, 10))
}

// scripts are the package's scripts by name, with the source EVAL sends.
var scripts = map[string]struct {
	s   *redis.Script
	src string
}{
	"obtain":      {obtainScript, obtainSrc},
	"refresh":     {refreshScript, refreshSrc},
	"release":     {releaseScript, releaseSrc},
	"fair-obtain": {fairObtainScript, fairObtainSrc},
	"fair-leave":  {fairLeaveScript, fairLeaveSrc},
	"fair-renew":  {fairRenewScript, fairRenewSrc},
}

// ScriptOf names the package's script that cmd runs ("obtain", "refresh",
// "release", "fair-obtain", "fair-leave" or "fair-renew"), or returns "" for any other
// command, so that tests can hook into one script's calls.
func ScriptOf(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	name, _ := args[0].(string)
	body, _ := args[1].(string)
	for n, s := range scripts {
		switch {
		case strings.EqualFold(name, "evalsha") && body == s.s.Hash():
			return n
		case strings.EqualFold(name, "eval") && body == s.src:
			return n
		}
	}
	return ""
}

// ScriptKey and ScriptArgs return the KEYS[1] and the ARGV of a script
// command.
func ScriptKey(cmd redis.Cmder) string { return fmt.Sprint(cmd.Args()[3]) }

func ScriptArgs(cmd redis.Cmder) []string {
	// evalsha sha numkeys key... arg...
	args := cmd.Args()
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil {
		panic(fmt.Sprintf("not a script call: %v", args))
	}
	var out []string
	for _, a := range args[3+n:] {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

// Gate returns the instance a RedLock asks first for key while every
// instance answers.
func (r *RedLock) Gate(key string) int { return r.order(key)[0] }

// InLine counts the waiters of c lined up for key.
func (c *Client) InLine(key string) int {
	c.line.mu.Lock()
	defer c.line.mu.Unlock()
	return len(c.line.m[key])
}

// RunScript runs the package's script name (see ScriptOf) once with keys
// and args and returns its integer reply, so that a test can check a script
// on a server of its own making.
func RunScript(ctx context.Context, rdb redis.Scripter, name string, keys []string, args ...any) (int64, error) {
	s, ok := scripts[name]
	if !ok {
		return 0, fmt.Errorf("no script %q", name)
	}
	return s.s.Run(ctx, rdb, keys, args...).Int64()
}

// ScriptSHA is the SHA1 that EVALSHA sends for the package's script name.
func ScriptSHA(name string) string { return scripts[name].s.Hash() }

// FairLine returns the ids in a fair lock's line on key, first first, and
// whether the line's two sets agree (every place has a lease and no lease
// is without a place).
func (c *Client) FairLine(ctx context.Context, key string) (ids []string, consistent bool, err error) {
	n := newNames(c.opts.Prefix, key)
	var line, leases *redis.StringSliceCmd
	// One MULTI, so that no script runs between the two reads.
	if _, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		line = p.ZRange(ctx, n.line, 0, -1)
		leases = p.ZRange(ctx, n.leases, 0, -1)
		return nil
	}); err != nil {
		return nil, false, err
	}
	ids, leased := line.Val(), leases.Val()
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	slices.Sort(leased)
	return ids, slices.Equal(sorted, leased), nil
}
