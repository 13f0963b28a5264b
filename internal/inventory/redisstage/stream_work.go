package redisstage

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The items with work: enqueue.lua puts the item of every order it queues
// in a set of the items whose queue holds work, in the same script, and a
// writer takes it out only when its stream holds nothing undelivered and
// nothing pending (orderwriter's drained.lua), also in one script. So the
// set holds every item with work, whatever instance queued it, and the
// writers' recovery pass reads that set, never the catalogue: an idle
// catalogue costs one read per pass.
//
// On one server (or under Sentinel) the set is one key per kind. On a
// Cluster a script touches one slot, so there is one set per slot, under a
// hash tag of that slot; WorkingItems reads them with one script per
// master.

// workKey names the set of items with work that item id belongs in.
func (s *RedisStream) workKey(id int64) string {
	if !s.cluster {
		// The tag cannot be an item's ({kind:id}), and the kind's keys
		// share its prefix.
		return "seckill:{" + s.redisStock.kind + ":work}:stream-items"
	}
	return slotWorkKey(s.redisStock.kind, slotOf(s.redisStock.kind+":"+strconv.FormatInt(id, 10)))
}

func slotWorkKey(kind string, slot int) string {
	return "seckill:{" + slotTags()[slot] + "}:stream-items:" + kind
}

// WorkingItems returns the items whose queue holds work: orders queued
// and not yet read, or read and not yet acknowledged. It fails with
// ErrUnavailable.
func (s *RedisStream) WorkingItems(ctx context.Context) ([]int64, error) {
	var ids []string
	var err error
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		ids, err = s.clusterWorkingItems(ctx, c)
	} else {
		ids, err = s.rdb.SMembers(ctx, s.workKey(0)).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read the %s items with queued orders: %w", inventory.ErrUnavailable, s.redisStock.kind, err)
	}
	out := make([]int64, 0, len(ids))
	for _, v := range ids {
		if id, err := strconv.ParseInt(v, 10, 64); err == nil {
			out = append(out, id)
		}
	}
	return out, nil
}

// clusterWorkingItems reads every slot's set, one script per range of
// slots one master serves (allow-cross-slot-keys: a master reads the sets
// of its own slots; a range that moves meanwhile fails the read, and the
// next recovery pass reads it again).
func (s *RedisStream) clusterWorkingItems(ctx context.Context, c *redis.ClusterClient) ([]string, error) {
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range slots {
		keys := make([]any, 0, r.End-r.Start+1)
		for slot := r.Start; slot <= r.End; slot++ {
			keys = append(keys, slotWorkKey(s.redisStock.kind, slot))
		}
		// The first key routes the script to the range's master; the
		// others go as arguments (declared keys must share a slot).
		ids, err := workingItems.Run(ctx, c, []string{keys[0].(string)}, keys...).StringSlice()
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	return out, nil
}

// slotOf is the Cluster slot of a hash tag (CRC16/XMODEM mod 16384).
func slotOf(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) & 16383
}

// slotTags names, for each Cluster slot, a hash tag that maps to it.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, 16384)
	left := len(tags)
	for n := 0; left > 0; n++ {
		tag := "w" + strconv.Itoa(n)
		if slot := slotOf(tag); tags[slot] == "" {
			tags[slot], left = tag, left-1
		}
	}
	return tags
})

// isCluster tells whether rdb is a Cluster client.
func isCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}
