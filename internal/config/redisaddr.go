package config

import (
	"errors"
	"fmt"
	"strings"
)

// unixPrefix marks a Redis address that is a Unix socket, for a Redis on
// the same machine: unix:/run/redis/redis.sock. MySQL's DSN says the same
// with unix(/path).
const unixPrefix = "unix:"

// RedisNetAddr returns the network and address to dial for a Redis
// address of SECKILL_REDIS_ADDR, SECKILL_REDLOCK_ADDRS or the lab's
// --cpu-redis: "unix" and the path for unix:/path, "tcp" and a itself
// otherwise. go-redis dials an Addr that starts with "/" over a Unix
// socket, so the path alone is what its clients take.
func RedisNetAddr(a string) (network, addr string) {
	if path, ok := strings.CutPrefix(a, unixPrefix); ok {
		return "unix", path
	}
	return "tcp", a
}

// checkRedisAddr says what is wrong with one Redis address: a unix: one
// must name an absolute path.
func checkRedisAddr(a string) error {
	if path, ok := strings.CutPrefix(a, unixPrefix); ok && !strings.HasPrefix(path, "/") {
		return fmt.Errorf("%q: a Unix socket needs an absolute path, such as unix:/run/redis/redis.sock", a)
	}
	return nil
}

// checkRedisAddrs checks SECKILL_REDIS_ADDR and SECKILL_REDLOCK_ADDRS. A
// Unix socket is a single server's: a Cluster's nodes announce each other
// by TCP address.
func checkRedisAddrs(c Config, fail func(string, error)) {
	unix := false
	for _, a := range c.RedisAddrs {
		if err := checkRedisAddr(a); err != nil {
			fail("SECKILL_REDIS_ADDR", err)
		}
		unix = unix || strings.HasPrefix(a, unixPrefix)
	}
	if unix && len(c.RedisAddrs) > 1 {
		fail("SECKILL_REDIS_ADDR", errors.New("a Unix socket names one server, not a Cluster's nodes"))
	}
	for _, a := range c.RedlockAddrs {
		if err := checkRedisAddr(a); err != nil {
			fail("SECKILL_REDLOCK_ADDRS", err)
		}
	}
}
