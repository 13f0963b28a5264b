package redisstage

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The reconcile job's cheap look at the copies it checked before: the
// stock and the generation of each copy (of each bucket for
// redis-sharded), read in one MGET of many copies (on a Cluster one MGET
// per copy, each in its own slot, pipelined). Whatever is done to a
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

// probeAll reads the key pairs: in MGETs of up to probeBatch pairs, or on
// a Cluster, where keys of several slots cannot share one, one MGET per
// pair (a pair is in one slot), all in one pipeline.
func probeAll(ctx context.Context, rdb redis.UniversalClient, keys [][]string) ([]look, error) {
	per := probeBatch
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		per = 1
	}
	pipe := rdb.Pipeline()
	var cmds []*redis.SliceCmd
	for from := 0; from < len(keys); from += per {
		batch := make([]string, 0, 2*per)
		for _, k := range keys[from:min(from+per, len(keys))] {
			batch = append(batch, k...)
		}
		cmds = append(cmds, pipe.MGet(ctx, batch...))
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("%w: probe copies: %w", inventory.ErrUnavailable, err)
	}
	out := make([]look, 0, len(keys))
	for _, c := range cmds {
		v := c.Val()
		if len(v)%2 != 0 {
			return nil, fmt.Errorf("%w: probe answered %v", inventory.ErrUnavailable, v)
		}
		for i := 0; i < len(v); i += 2 {
			out = append(out, look{v[i], v[i+1]})
		}
	}
	if len(out) != len(keys) {
		return nil, fmt.Errorf("%w: probe answered %d pairs for %d", inventory.ErrUnavailable, len(out), len(keys))
	}
	return out, nil
}

// probeBatch is how many copies' key pairs one MGET reads.
const probeBatch = 500
