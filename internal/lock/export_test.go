package lock

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// ScriptsOnly runs one obtain and one release script on key, the Redis work
// of an uncontended Obtain and Release without the Lease around it, so the
// benchmarks can tell the scripts' cost from the client's.
func (c *Client) ScriptsOnly(ctx context.Context, key string, ttl time.Duration) error {
	n := newNames(c.opts.Prefix, key)
	owner := newOwnerToken()
	ok, token, err := c.try(ctx, n, owner, false, false, ttl)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("lock: ScriptsOnly: key is held")
	}
	return c.release(ctx, n, owner, strconv.FormatInt(token, 10))
}
