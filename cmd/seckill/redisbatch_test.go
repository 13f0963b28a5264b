package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestRedisBatchClientChecksConnectionsBeforeUse: the client of
// redis-atomic's batches keeps go-redis's check of a pooled connection
// before use, so after a Redis restart neither a command nor a pipeline
// (the batches' path) fails on a connection the old server closed: each
// stale one is dropped before use, and a new one dialled.
func TestRedisBatchClientChecksConnectionsBeforeUse(t *testing.T) {
	p := testenv.StartRedis(t)
	rdb := newBatchClient(config.Config{RedisAddrs: []string{p.Addr}, RedisPool: 64}).(*redis.Client)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	testenv.WarmPool(t, rdb, 4)
	if _, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error { return pl.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	if ps := rdb.PoolStats().PipelineStats; ps == nil || ps.IdleConns != 1 {
		t.Fatalf("pipeline pool %+v after a pipeline, want one idle connection", ps)
	}
	p.Restart()
	if _, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error { return pl.Ping(ctx).Err() }); err != nil {
		t.Errorf("a pipeline after the restart: %v, want its stale connection dropped before use", err)
	}
	for i := range 4 {
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Errorf("command %d after the restart: %v, want its stale connection dropped before use", i, err)
		}
	}
}

// TestRedisBatchClientIsOfTheMainClientsKind: the batch client talks to
// what the app's client talks to: one server, a Cluster, or the primary
// of a Sentinel group.
func TestRedisBatchClientIsOfTheMainClientsKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  config.Config
		want string
	}{
		{"one server", config.Config{RedisAddrs: []string{"127.0.0.1:1"}}, "*redis.Client"},
		{"cluster", config.Config{RedisAddrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, "*redis.ClusterClient"},
		{"sentinels", config.Config{RedisSentinels: []string{"127.0.0.1:1"}, RedisMaster: "m"}, "*redis.Client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			main, batch := newRedisClient(tc.cfg), newBatchClient(tc.cfg)
			t.Cleanup(func() { _ = main.Close(); _ = batch.Close() })
			if got, want := fmt.Sprintf("%T", batch), fmt.Sprintf("%T", main); got != want || got != tc.want {
				t.Errorf("batch client %s, app's client %s; want both %s", got, want, tc.want)
			}
		})
	}
}
