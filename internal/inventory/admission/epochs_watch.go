package admission

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// The subscription that lets an instance trust the epochs it remembers
// (see RedisEpochs). While it is up it costs nothing: one connection
// blocked in a read, however many items there are. While it is down,
// nothing remembered is trusted, and it is tried again after a pause that
// starts at resubscribeFirst and doubles up to resubscribeMax while tries
// fail without a confirmation: a Redis that refuses SUBSCRIBE (an ACL
// without the channel) gets one try a second, not ten.
const (
	resubscribeFirst = 100 * time.Millisecond
	resubscribeMax   = time.Second
)

// Watch keeps the subscription to epochChannel until ctx ends, and drops
// every remembered epoch whenever the subscription is down.
func (e *RedisEpochs) Watch(ctx context.Context) {
	wait := resubscribeFirst
	for ctx.Err() == nil {
		// The error is the subscription's end; memory is dropped either way.
		if confirmed, _ := e.listen(ctx); confirmed {
			wait = resubscribeFirst
		}
		e.drop(false)
		if ctx.Err() != nil {
			return
		}
		e.pause(ctx, wait)
		wait = min(2*wait, resubscribeMax)
	}
}

// listen subscribes, trusts memory from the subscription's confirmation
// on, and drops the epoch of every item announced, until the subscription
// fails; confirmed says whether Redis confirmed it. The same subscription
// hears the sell-outs (epochs_soldout.go).
func (e *RedisEpochs) listen(ctx context.Context) (confirmed bool, err error) {
	ps := e.sub.Subscribe(ctx, epochChannel, soldOutChannel)
	defer ps.Close()
	// A blocked Receive does not watch ctx: closing the subscription
	// ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			return confirmed, err
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Channel != epochChannel {
				continue // the sell-outs' (epochs_soldout.go): only a help
			}
			// The first confirmation, or one after go-redis reconnected:
			// announcements may have been missed in between.
			e.drop(m.Kind == "subscribe")
			confirmed = confirmed || m.Kind == "subscribe"
		case *redis.Message:
			if m.Channel == soldOutChannel {
				e.heardSoldOut(ctx, m.Payload)
				continue
			}
			e.mu.Lock()
			delete(e.known, m.Payload)
			e.gen++
			e.mu.Unlock()
		}
	}
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
