package reconcile

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Activity collects, in one instance, the items bought since it last told
// the fleet: an inventory.Service's OnBuy marks them, and the instance's
// reconcile job adds them to the kind's set of items to check (one SADD
// per run, before it tries the run), where the run that takes them
// drains it (work.go). So an item sold by a stage that keeps no Redis copy
// (the lock stages, db-atomic) is still audited after its sale, and an
// idle item costs nothing. The zero value is ready to use.
type Activity struct {
	mu  sync.Mutex
	ids map[int64]struct{}
}

// Mark records that item id was bought.
func (a *Activity) Mark(id int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids = map[int64]struct{}{}
	}
	a.ids[id] = struct{}{}
}

// flush adds the marked items to key; those it could not add stay marked.
func (a *Activity) flush(ctx context.Context, rdb redis.UniversalClient, key string) error {
	a.mu.Lock()
	ids := a.ids
	a.ids = nil
	a.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, 0, len(ids))
	for id := range ids {
		members = append(members, id)
	}
	if err := rdb.SAdd(ctx, key, members...).Err(); err != nil {
		for id := range ids {
			a.Mark(id)
		}
		return err
	}
	return nil
}
