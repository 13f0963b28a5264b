package redisstage

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The reconcile job's cheap look at the copies it checked before: one
// MGET of the stock and the generation per copy (per bucket for
// redis-sharded, each in its own slot), pipelined. Whatever is done to a
// copy changes one of them: a reservation or a queued order takes from
// the stock (a crashed instance's too, and the job then checks the copy
// in full until the reservation is settled), a give-back or a returned
// unit adds to it, a load gives it a new generation. A copy the job found
// clean with nothing in flight and finds unchanged has nothing to repair.

// Probe is what one look found of an item's copy.
type Probe struct {
	State   string // the stock and generation, bucket by bucket
	Missing bool   // the copy, or one of its buckets, is missing
}

// Probe looks at the Redis copies of items ids. It fails with ErrUnavailable.
func (s *RedisAtomic) Probe(ctx context.Context, ids []int64) (map[int64]Probe, error) {
	keys := make([][]string, len(ids))
	for i, id := range ids {
		keys[i] = []string{s.keys(id)[0], s.key(id, "gen")}
	}
	looks, err := probeAll(ctx, s.rdb, keys)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]Probe, len(ids))
	for i, id := range ids {
		out[id] = fold(looks[i : i+1])
	}
	return out, nil
}

// Probe looks at the buckets of items ids: one MGET per bucket.
func (s *RedisSharded) Probe(ctx context.Context, ids []int64) (map[int64]Probe, error) {
	keys := make([][]string, 0, len(ids)*s.buckets)
	for _, id := range ids {
		for b := range s.buckets {
			keys = append(keys, []string{s.bucketKeys(id, b)[0], s.bucketGen(id, b)})
		}
	}
	looks, err := probeAll(ctx, s.rdb, keys)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]Probe, len(ids))
	for i, id := range ids {
		out[id] = fold(looks[i*s.buckets : (i+1)*s.buckets])
	}
	return out, nil
}

// look is one MGET's answer: the stock (nil: missing) and generation.
type look [2]any

// fold makes one item's Probe of its copy's looks (one per bucket).
func fold(looks []look) Probe {
	var p Probe
	parts := make([]string, len(looks))
	for i, l := range looks {
		stock, _ := l[0].(string)
		gen, _ := l[1].(string)
		parts[i] = stock + "/" + gen
		p.Missing = p.Missing || l[0] == nil
	}
	p.State = strings.Join(parts, ",")
	return p
}

// probeAll reads each key pair with one MGET, all in one pipeline (on a
// Cluster, one per node; a pair is in one slot).
func probeAll(ctx context.Context, rdb redis.UniversalClient, keys [][]string) ([]look, error) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.MGet(ctx, k...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("%w: probe copies: %w", inventory.ErrUnavailable, err)
	}
	out := make([]look, len(keys))
	for i, c := range cmds {
		v := c.Val()
		if len(v) != 2 {
			return nil, fmt.Errorf("%w: probe answered %v", inventory.ErrUnavailable, v)
		}
		out[i] = look{v[0], v[1]}
	}
	return out, nil
}
