package main

import (
	"github.com/redis/go-redis/v9"
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

// universalOptions are the options of the app's Redis client for serve:
// one server, or a Cluster when addrs names several.
func universalOptions(addrs []string, password string) *redis.UniversalOptions {
	return &redis.UniversalOptions{Addrs: addrs, Password: password, ContextTimeoutEnabled: true, MaxRetries: -1, MaxRedirects: -1}
}

// clientOptions are the options of a client of one of demo's servers.
func clientOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}
}
