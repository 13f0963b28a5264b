package redisstage

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The reconcile job's cheap look at the copies it repaired before: one
// script per copy (per bucket for redis-sharded), pipelined, that says
// whether the copy is still what the job last found clean. Only a copy
// that changed, has work in flight or is missing gets the full Repair.

// Probe is what one look found of an item's copy.
type Probe struct {
	State   string // the stock and generation, bucket by bucket
	Busy    bool   // reservations, queued orders, cancellations or moves in flight
	Missing bool   // the copy, or one of its buckets, is missing
}

// Probe looks at the Redis copies of items ids. It fails with ErrUnavailable.
func (s *RedisAtomic) Probe(ctx context.Context, ids []int64) (map[int64]Probe, error) {
	keys := make([][]string, len(ids))
	for i, id := range ids {
		k := s.keys(id)
		keys[i] = []string{k[0], s.key(id, "gen"), k[2], k[3], s.key(id, "cancelling")}
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

// Probe looks at the buckets of items ids: one script per bucket (each in
// its own slot), bucket 0's with the item's moves in flight.
func (s *RedisSharded) Probe(ctx context.Context, ids []int64) (map[int64]Probe, error) {
	keys := make([][]string, 0, len(ids)*s.buckets)
	for _, id := range ids {
		for b := range s.buckets {
			k := s.bucketKeys(id, b)
			ks := []string{k[0], s.bucketGen(id, b), k[1]}
			if b == 0 {
				ks = append(ks, s.moveKeys(id)[0])
			}
			keys = append(keys, ks)
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

// look is one probe.lua answer: stock (-1 missing), generation, in flight.
type look struct {
	stock    int64
	gen      string
	inFlight int64
}

// fold makes one item's Probe of its copy's looks (one per bucket).
func fold(looks []look) Probe {
	var p Probe
	parts := make([]string, len(looks))
	for i, l := range looks {
		parts[i] = strconv.FormatInt(l.stock, 10) + "/" + l.gen
		p.Busy = p.Busy || l.inFlight > 0
		p.Missing = p.Missing || l.stock < 0
	}
	p.State = strings.Join(parts, ",")
	return p
}

// probeAll runs probe.lua once for each key list, in one pipeline (on a
// Cluster, one per node), loading the script once if a server lacks it.
func probeAll(ctx context.Context, rdb redis.UniversalClient, keys [][]string) ([]look, error) {
	for attempt := 0; ; attempt++ {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(keys))
		for i, k := range keys {
			cmds[i] = probe.EvalSha(ctx, pipe, k)
		}
		_, err := pipe.Exec(ctx)
		if err != nil && attempt == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if err := probe.Load(ctx, rdb).Err(); err != nil {
				return nil, fmt.Errorf("%w: load the probe: %w", inventory.ErrUnavailable, err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: probe copies: %w", inventory.ErrUnavailable, err)
		}
		out := make([]look, len(keys))
		for i, c := range cmds {
			v, err := c.Slice()
			if err != nil || len(v) != 3 {
				return nil, fmt.Errorf("%w: probe answered %v: %w", inventory.ErrUnavailable, v, err)
			}
			st, _ := v[0].(int64)
			gen, _ := v[1].(string)
			n, _ := v[2].(int64)
			out[i] = look{stock: st, gen: gen, inFlight: n}
		}
		return out, nil
	}
}
