package room

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/testenv"
)

// BenchmarkPoll is one poll of a waiting ticket, answered from memory;
// BenchmarkRedisRoundTrip, one PING to the same Redis, is its baseline:
// a poll that read the room would cost at least that.
func BenchmarkPoll(b *testing.B) {
	rdb := testenv.Redis(b)
	m := New(Options{RDB: rdb, Namespace: testenv.Name("rb"), Step: time.Hour, Stale: time.Hour})
	b.Cleanup(m.Close)
	ctx := context.Background()
	if _, err := m.Set(ctx, 1, Settings{Rate: 1, MaxInside: 1}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rdb.Del(ctx, m.keys(1)...).Err() })
	_, _, _, err := m.Join(ctx, 1, "a")
	if err != nil {
		b.Fatal(err)
	}
	tok, _, _, err := m.Join(ctx, 1, "b")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if st, err := m.Poll(ctx, 1, "b", tok); err != nil || st.State != StateWaiting {
			b.Fatalf("%+v, %v", st, err)
		}
	}
}

func BenchmarkRedisRoundTrip(b *testing.B) {
	rdb := testenv.Redis(b)
	ctx := context.Background()
	for b.Loop() {
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
