package httpapi_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestRedisPing: GET /api/v1/admin/redis-ping is an admin route that makes
// exactly one round trip, a PING, to the Redis of the Idempotency-Key
// records, and says how long it took; 503 unavailable when that Redis does
// not answer, 404 no-redis on an instance without one.
func TestRedisPing(t *testing.T) {
	const admin = "ping-admin-token"
	serve := func(store *idempotency.Store, header map[string]string) *httptest.ResponseRecorder {
		h := httpapi.NewServer(httpapi.Deps{Instance: "ping-1", AdminToken: admin, Idempotency: store})
		req := httptest.NewRequest("GET", "/api/v1/admin/redis-ping", nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	bearer := map[string]string{"Authorization": "Bearer " + admin}

	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	seen := &roundTrips{}
	rdb.AddHook(seen)
	store := idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("ping") + ":"})

	// A warm connection, so that the count below is the route's alone
	// (a new connection's handshake sends HELLO and CLIENT first).
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	seen.take()
	if rec := serve(store, nil); rec.Code != 401 || problemType(t, rec) != "unauthorized" {
		t.Fatalf("without the admin token: %d %s", rec.Code, rec.Body)
	}
	if got := seen.take(); len(got) != 0 {
		t.Fatalf("a refused ping sent %q to Redis", got)
	}
	rec := serve(store, bearer)
	var p api.RedisPing
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Instance != "ping-1" || p.RoundTripMS < 0 {
		t.Fatalf("ping: %d %s", rec.Code, rec.Body)
	}
	if got := seen.take(); len(got) != 1 || got[0] != "ping" {
		t.Fatalf("a ping sent %q to Redis, want one ping", got)
	}

	// A Redis that takes the connection and never answers: the ping ends
	// at the client's read timeout as 503 unavailable, with Retry-After.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-accepted
		for _, c := range held {
			_ = c.Close()
		}
	})
	mute := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = mute.Close() })
	rec = serve(idempotency.New(mute, idempotency.Options{}), bearer)
	if rec.Code != 503 || problemType(t, rec) != "unavailable" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("ping of a Redis that does not answer: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}

	if rec := serve(nil, bearer); rec.Code != 404 || problemType(t, rec) != "no-redis" {
		t.Fatalf("ping without Redis: %d %s", rec.Code, rec.Body)
	}
}
