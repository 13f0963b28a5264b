package redisstage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// Nothing is copied into Redis at start: an item's copy is loaded by a
// reset, or by the first buy that finds none (and again by the first buy
// after Redis lost it). A crowd arriving at an item that has no copy yet
// would each read the database and run the load; the guard here makes
// them load it once:
//   - within an instance, the buyers of one item share one load
//     (singleflight), each still waiting no longer than its own deadline;
//   - across the fleet, the loader holds a short guard key in the item's
//     slot (SET NX PX); the others wait for the copy, polling with a
//     backoff, and take the guard over if its holder died with it.
//
// The guard only saves work. The load itself (load.lua, bucket_load.lua)
// never overwrites a copy that exists, so two loaders, or a loader and a
// reset, still leave one copy: the reset's, whose generation is newer.

// loadGuardTTL outlives a load (a database read of the item and its
// buyers) with room to spare. A load that takes longer lets a second
// loader in, which is harmless: the second finds the copy and keeps it.
const loadGuardTTL = 5 * time.Second

// loadWaitMax caps the wait between two looks for another loader's copy.
const loadWaitMax = 50 * time.Millisecond

var releaseLoad = script("load_release")

// loadGuard is one stage's guard over its first loads; the zero value is
// ready to use.
type loadGuard struct{ flight singleflight.Group }

// once makes sure item id has its copy: copied says whether it is there,
// load loads it, under the guard key guard. It returns once the copy is
// there (loaded here or elsewhere), or fails with ErrUnavailable when ctx
// ends first, or with load's error.
func (g *loadGuard) once(ctx context.Context, rdb redis.UniversalClient, id int64, guard string,
	copied func(context.Context) (bool, error), load func(context.Context) error) error {
	ch := g.flight.DoChan(strconv.FormatInt(id, 10), func() (any, error) {
		// The load is shared: the caller that started it may leave (hang
		// up, reach its deadline) while others still wait for it, so it
		// runs apart from that caller's cancellation, for at most the
		// guard's lifetime. Each caller still waits only until its own
		// deadline.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadGuardTTL)
		defer cancel()
		return nil, acrossFleet(lctx, rdb, guard, copied, load)
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for the copy of item %d to load: %w", inventory.ErrUnavailable, id, ctx.Err())
	}
}

// acrossFleet loads the copy unless another instance does: it takes the
// guard, or waits for the copy while another holds it.
func acrossFleet(ctx context.Context, rdb redis.UniversalClient, guard string,
	copied func(context.Context) (bool, error), load func(context.Context) error) error {
	token, wait := newGen(), 2*time.Millisecond
	for {
		if ok, err := copied(ctx); err != nil || ok {
			return err
		}
		got, err := rdb.SetNX(ctx, guard, token, loadGuardTTL).Result()
		if err != nil {
			return fmt.Errorf("%w: take the load guard %s: %w", inventory.ErrUnavailable, guard, err)
		}
		if got {
			err := load(ctx)
			// A guard left behind (the release failed) expires within
			// loadGuardTTL, and the waiters look for the copy first.
			_ = releaseLoad.Run(context.WithoutCancel(ctx), rdb, []string{guard}, token).Err()
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: waiting for another loader of %s: %w", inventory.ErrUnavailable, guard, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, loadWaitMax)
	}
}

// exists is a copied for one key.
func exists(rdb redis.UniversalClient, key string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		n, err := rdb.Exists(ctx, key).Result()
		if err != nil {
			return false, fmt.Errorf("%w: look for %s: %w", inventory.ErrUnavailable, key, err)
		}
		return n == 1, nil
	}
}

// loading reports whether a first load of the copy is in flight (its
// guard is held): a copy found missing meanwhile is not lost.
func loading(ctx context.Context, rdb redis.UniversalClient, guard string) (bool, error) {
	n, err := rdb.Exists(ctx, guard).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	}
	return n == 1, nil
}
