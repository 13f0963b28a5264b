package lock

import (
	"context"
	"errors"
	"fmt"
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
	owner, _ := ObtainOptions{}.owner()
	ok, token, err := c.try(ctx, n, owner, false, false, ttl)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("lock: ScriptsOnly: key is held")
	}
	return c.release(ctx, n, owner, strconv.FormatInt(token, 10))
}

// ScriptOf names the package's script that cmd runs ("obtain", "refresh" or
// "release"), or returns "" for any other command, so that tests can hook
// into one script's calls.
func ScriptOf(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	name, _ := args[0].(string)
	body, _ := args[1].(string)
	for s, n := range map[*redis.Script]string{obtainScript: "obtain", refreshScript: "refresh", releaseScript: "release"} {
		switch {
		case strings.EqualFold(name, "evalsha") && body == s.Hash():
			return n
		case strings.EqualFold(name, "eval") && body == scriptSource(s):
			return n
		}
	}
	return ""
}

func scriptSource(s *redis.Script) string {
	switch s {
	case obtainScript:
		return obtainSrc
	case refreshScript:
		return refreshSrc
	case releaseScript:
		return releaseSrc
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

// RunScript runs the package's script name ("obtain", "refresh" or
// "release") once with keys and args and returns its integer reply, so that
// a test can check a script on a server of its own making.
func RunScript(ctx context.Context, rdb redis.Scripter, name string, keys []string, args ...any) (int64, error) {
	s := map[string]*redis.Script{"obtain": obtainScript, "refresh": refreshScript, "release": releaseScript}[name]
	if s == nil {
		return 0, fmt.Errorf("no script %q", name)
	}
	return s.Run(ctx, rdb, keys, args...).Int64()
}

// ScriptSHA is the SHA1 that EVALSHA sends for the package's script name.
func ScriptSHA(name string) string {
	return map[string]*redis.Script{"obtain": obtainScript, "refresh": refreshScript, "release": releaseScript}[name].Hash()
}
