package admission

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testenv"
)

// pauses records Watch's pauses between subscriptions instead of waiting,
// and ends the watch after stopAfter of them.
type pauses struct {
	mu        sync.Mutex
	got       []time.Duration
	stopAfter int
	stop      context.CancelFunc
	each      func() // run at each pause, before it returns
}

func (p *pauses) pause(_ context.Context, d time.Duration) {
	p.mu.Lock()
	p.got = append(p.got, d)
	n := len(p.got)
	p.mu.Unlock()
	if p.each != nil {
		p.each()
	}
	if n >= p.stopAfter {
		p.stop()
	}
}

// subscribeTries reads how many SUBSCRIBE commands the server saw,
// refused ones included.
func subscribeTries(t *testing.T, admin *redis.Client) int {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if !strings.HasPrefix(line, "cmdstat_subscribe:") {
			continue
		}
		n := 0
		for _, f := range strings.Split(strings.TrimPrefix(line, "cmdstat_subscribe:"), ",") {
			var v int
			if k, val, ok := strings.Cut(f, "="); ok && (k == "calls" || k == "rejected_calls" || k == "failed_calls") {
				v, _ = strconv.Atoi(val)
				n += v
			}
		}
		return n
	}
	return 0
}

// TestWatchBacksOffWhileTheSubscriptionIsRefused: a Redis that refuses
// the subscription (an ACL user with no channel) is asked again after
// 100 ms, then 200, 400, 800 and then once a second, one SUBSCRIBE a try:
// not ten a second for as long as it refuses.
func TestWatchBacksOffWhileTheSubscriptionIsRefused(t *testing.T) {
	addr := testenv.StartRedis(t).Addr
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "nosub", "on", ">nosub-pw", "~*", "+@all", "resetchannels").Err(); err != nil {
		t.Fatal(err)
	}
	sub := redis.NewClient(&redis.Options{Addr: addr, Username: "nosub", Password: "nosub-pw"})
	t.Cleanup(func() { _ = sub.Close() })
	e := NewRedisEpochs(admin, sub, time.Second)
	wctx, cancel := context.WithCancel(ctx)
	p := &pauses{stopAfter: 8, stop: cancel}
	e.SetPause(p.pause)
	before := subscribeTries(t, admin)
	e.Watch(wctx)
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second, time.Second, time.Second}
	if !slices.Equal(p.got, want) {
		t.Fatalf("pauses between refused subscriptions: %v, want %v", p.got, want)
	}
	if n := subscribeTries(t, admin) - before; n != len(want) {
		t.Fatalf("%d SUBSCRIBE commands for %d tries, want one a try", n, len(want))
	}
	if e.Subscribed() {
		t.Fatal("a refused subscription counts as up")
	}
}

// TestWatchResubscribesAtOnceAfterALostSubscription: a subscription that
// was confirmed and then lost (its connection killed) is tried again
// after the first pause, each time: the back-off is for refusals only.
func TestWatchResubscribesAtOnceAfterALostSubscription(t *testing.T) {
	addr := testenv.StartRedis(t).Addr
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	e := NewRedisEpochs(rdb, rdb, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	p := &pauses{stopAfter: 3, stop: cancel}
	e.SetPause(p.pause)
	paused := make(chan struct{}, 3)
	p.each = func() { paused <- struct{}{} }
	kills, done := 0, make(chan struct{})
	go func() {
		defer close(done)
		for range 3 {
			for !e.Subscribed() && ctx.Err() == nil {
				time.Sleep(time.Millisecond) // poll until the subscription is confirmed
			}
			if n, err := rdb.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Int(); err != nil || n != 1 {
				t.Errorf("killing the subscription: %d killed, %v", n, err)
			}
			kills++
			<-paused // the watch saw it
		}
	}()
	e.Watch(ctx)
	<-done
	want := []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	if !slices.Equal(p.got, want) {
		t.Fatalf("pauses after lost subscriptions: %v, want %v", p.got, want)
	}
	if kills != 3 {
		t.Fatalf("%d subscriptions killed, want 3", kills)
	}
}
