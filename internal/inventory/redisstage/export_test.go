package redisstage

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// WaitingToWrite counts the sales of item id that wait behind a database
// write of the item in progress (0 without a group commit).
func (s *RedisAtomic) WaitingToWrite(id int64) int {
	g, ok := s.sales.(*groupCommit)
	if !ok {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.lanes[id]; l != nil {
		return len(l.waiting)
	}
	return 0
}

// BucketKeysForTest are bucket b's stock, reservations and buyers keys.
func (s *RedisSharded) BucketKeysForTest(id int64, b int) []string { return s.bucketKeys(id, b) }

// ShardedScriptsForTest are the SHA1s of redis-sharded's bucket script
// (bucket_take.lua) and of the script that forgets a buyer
// (bucket_unclaim.lua), by which a test picks their requests on the wire.
func ShardedScriptsForTest() (bucketTake, forget string) { return take.Hash(), unclaim.Hash() }

// ReserveScriptForTest is the SHA1 of redis-atomic's reserve script, by
// which a test picks its requests on the wire. It loads the script and
// redis-sharded's bucket script into rdb's cache, so that each runs as
// one EVALSHA, never a NOSCRIPT and an EVAL.
func ReserveScriptForTest(ctx context.Context, rdb redis.Scripter) (string, error) {
	if err := take.Load(ctx, rdb).Err(); err != nil {
		return "", err
	}
	return reserve.Hash(), reserve.Load(ctx, rdb).Err()
}

// BatchReservesForTest lets at most flying reservation scripts or batches
// be in flight before a script waits (reserve_batch.go); 0 sends every
// script alone.
func (s *RedisAtomic) BatchReservesForTest(flying int) {
	s.reserves.off, s.reserves.limit = flying == 0, flying
}

// ReservesWaitingForTest counts the reservation scripts that wait for
// the next batch.
func (s *RedisAtomic) ReservesWaitingForTest() int {
	s.reserves.mu.Lock()
	defer s.reserves.mu.Unlock()
	return len(s.reserves.waiting)
}

// GiveBackScriptForTest is the SHA1 of redis-sharded's give-back script
// (bucket_give_back.lua), by which a test picks its requests.
func GiveBackScriptForTest() string { return giveBackPart.Hash() }

// AtomicGiveBackScriptForTest is the SHA1 of redis-atomic's give-back
// script (give_back.lua).
func AtomicGiveBackScriptForTest() string { return giveBack.Hash() }
