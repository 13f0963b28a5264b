package main

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/lock"
)

// The app's Redis clients send every command once. go-redis's default
// (MaxRetries 3; on a Cluster, MaxRedirects 3, which counts network
// retries too) sends a command again after an EOF, a reset or a read
// timeout, when the first may well have run. Every script the app runs
// would then answer about its own first run: reserve.lua "already bought"
// about the buyer's own unit, enqueue.lua a duplicate, the Idempotency-Key
// begin.lua "in progress" about the request itself, and the lock's
// scripts "held" about their own grant (internal/lock refuses such a
// client). With retries off, a lost reply comes back to the caller as an
// error, not as a wrong answer. On a Cluster this also stops go-redis following MOVED and ASK
// while a slot moves: those calls fail (they did not run) until go-redis
// has reloaded the slot map, which the redirect itself triggers.

//
// With Sentinels the client is go-redis's failover client: it asks the
// Sentinels for the primary of the master name, and after a failover
// (their +switch-master) drops its connections to the old one. Retries
// stay off there too: a command cut off by the switch comes back as an
// error (the buyer hears 503), and the next one reaches the new primary.

// universalOptions are the options of the app's Redis client for serve:
// one server, a Cluster when SECKILL_REDIS_ADDR names several, or the
// primary of a Sentinel group (SECKILL_REDIS_SENTINELS and
// SECKILL_REDIS_MASTER).
func universalOptions(cfg config.Config) *redis.UniversalOptions {
	o := &redis.UniversalOptions{Addrs: redisAddrs(cfg.RedisAddrs), Password: cfg.RedisPassword, PoolSize: cfg.RedisPool,
		ContextTimeoutEnabled: true, MaxRetries: -1, MaxRedirects: -1, Dialer: unpeekedDial}
	if len(cfg.RedisSentinels) > 0 {
		o.Addrs, o.MasterName, o.SentinelPassword = cfg.RedisSentinels, cfg.RedisMaster, cfg.RedisSentinelPassword
	}
	return o
}

// newRedisClient is the app's client of universalOptions. On a Cluster the
// slot map is read again once it is a second old (go-redis's default is a
// minute): with retries off, a call to a master that died fails without
// making go-redis reread the map, so after the failover every call for the
// slots of the dead master would still go to it, and those buyers would
// hear 503 for up to a minute after its replica took over.
func newRedisClient(cfg config.Config) redis.UniversalClient {
	return universalClient(universalOptions(cfg))
}

// batchPool is the pool of the client that carries redis-atomic's batches
// of reservation scripts, and of its pool for pipelines, where the batches
// go: a redis-atomic stage (one per kind of item) has at most two scripts
// or batches in flight (reserve_batch.go's maxFlying), so a few
// connections serve an instance's batches.
const batchPool = 8

// newBatchClient is the client of redis-atomic's batches (SetBatchClient):
// the options of newRedisClient (one server, a Cluster or Sentinels) with
// go-redis's own dialer, which checks each pooled connection before use,
// so that a batch is never sent on a connection the server closed (a
// restart, CLIENT KILL) and fails all its buyers at once. The check's
// system call is paid once a batch, shared by its buyers
// (internal/redisconn).
func newBatchClient(cfg config.Config) redis.UniversalClient {
	o := universalOptions(cfg)
	o.Dialer, o.PoolSize, o.PipelinePoolSize = nil, batchPool, batchPool
	return universalClient(o)
}

// universalClient is the client of o: see newRedisClient.
func universalClient(o *redis.UniversalOptions) redis.UniversalClient {
	if o.MasterName == "" && len(o.Addrs) > 1 {
		co := o.Cluster()
		co.ClusterStateReloadInterval = time.Second
		return redis.NewClusterClient(co)
	}
	return redis.NewUniversalClient(o)
}

// redisTarget names what universalOptions connects to, for error messages.
func redisTarget(cfg config.Config) string {
	if len(cfg.RedisSentinels) > 0 {
		return fmt.Sprintf("SECKILL_REDIS_SENTINELS=%v SECKILL_REDIS_MASTER=%s", cfg.RedisSentinels, cfg.RedisMaster)
	}
	return fmt.Sprintf("SECKILL_REDIS_ADDR=%v", cfg.RedisAddrs)
}

// clientOptions are the options of a client of one of demo's servers.
func clientOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, Dialer: unpeekedDial}
}

// batchOptions are the options of the client of redis-atomic's batches
// on one of demo's servers: clientOptions with go-redis's own dialer, and
// its check of each connection before use (see newBatchClient).
func batchOptions(addr string) *redis.Options {
	o := clientOptions(addr)
	o.Dialer, o.PoolSize, o.PipelinePoolSize = nil, batchPool, batchPool
	return o
}

// redlockClient is a client of one of redlock's independent servers at
// addr (host:port or unix:/path): lock.InstanceOptions, dialled without
// go-redis's per-Get peek (redisdial.go).
func redlockClient(addr, password string, pool int) *redis.Client {
	_, a := config.RedisNetAddr(addr)
	o := lock.InstanceOptions(&redis.Options{Addr: a, Password: password, PoolSize: pool})
	o.Dialer = unpeekedDial
	return redis.NewClient(o)
}

// redisAddrs are addrs as go-redis takes them: a unix:/path as the path.
func redisAddrs(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		_, out[i] = config.RedisNetAddr(a)
	}
	return out
}
