// Package redisconn dials Redis for clients that skip go-redis's check of
// each pooled connection before use. The app's clients dial through it
// (cmd/seckill), and so do the tests of other packages that need a client
// whose stale connections go unnoticed until a command fails on them.
package redisconn

import (
	"context"
	"net"
	"time"
)

// go-redis v9 checks every connection it takes from its pool with a
// non-blocking recv(MSG_PEEK) (connCheck in its internal/pool; go-redis
// issue #2599), so that a connection the server closed while it sat idle
// is dropped before use instead of failing its command. That is one more
// system call on every command, paid to save one failed command per
// pooled connection on the rare day Redis restarts or drops its clients.
//
// The app does not pay it. BenchmarkRedisPoolCheck (cmd/seckill; 64
// goroutines, the two clients interleaved, five runs on a busy 2-core
// machine): with the check a PING cost the client 1.06-1.10x the CPU of a
// PING without it (median 1.07x, about 600 ns more), an EVALSHA
// 1.06-1.10x (median 1.09x); a trace counts one recvfrom per command
// more. go-redis has no option to turn the check off; it skips it for a
// connection that is not a syscall.Conn, as it does for TLS. So the app
// dials its own connections, the way go-redis's default dialer does, and
// hands them over wrapped in a type that hides the socket.
//
// The price, tested by TestRedisRestartCostsOneFailurePerConnection
// (cmd/seckill): after a restart, each idle connection fails its next
// command once. The app's clients send a command once, so that caller
// gets the error: a buyer hears 503 unavailable, and nothing was written,
// since the restarted server never read the command. The failed
// connection is then dropped, and the next command dials a new one. One
// command may carry several buyers: redis-atomic gathers concurrent
// buyers' reservations into one pipeline (redisstage's reserve_batch.go),
// and a batch sent on a stale connection would fail every buyer in it
// (three serve, CLIENT KILL of 71 connections mid-burst: 214 buyers
// answered 503). So batches go through a second client of the app's, a
// small pool dialled by go-redis's own dialer, which checks a connection
// before each use: the peek is paid once a batch, shared by its buyers,
// and a stale connection is dropped before a batch is sent on it
// (TestBatchOnStaleConnectionsCostsNoBuyer in redisstage,
// TestRedisBatchClientChecksConnectionsBeforeUse in cmd/seckill). A
// reservation then costs at most one buyer per stale connection of the
// app's client, as issue 61 promises: a lone script sent on one fails
// its one buyer. The Idempotency-Key store's pipelines of gathered key
// reads go through the same client (TestUsedBatchOnStaleConnectionsIsAnswered
// in idempotency). A MySQL group commit does not have such a guard: a
// killed MySQL connection still fails its group (docs/operations.md).

// keepAlive is go-redis's default for its own dialer: a dead peer is
// noticed within about 45 seconds of silence.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}

// dialTimeout is go-redis's default dial timeout.
const dialTimeout = 5 * time.Second

// Dial dials a Redis server as go-redis's default dialer does (TCP
// keep-alives, a 5 s timeout, "unix" for a socket path) and returns the
// connection without its syscall.Conn, so that go-redis does not peek at
// it on every pool Get. Its errors are net.Dialer's. It fits
// redis.Options.Dialer.
func Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAliveConfig: keepAlive}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return unpeekedConn{c}, nil
}

// unpeekedConn is a net.Conn with nothing else: no SyscallConn method, so
// go-redis's pool check finds no socket to peek at.
type unpeekedConn struct{ net.Conn }
