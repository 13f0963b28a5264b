package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// usedHook holds the first EXISTS sent alone until hold is closed (or its
// context ends), records what goes to Redis, and can cut pipelines.
type usedHook struct {
	hold     chan struct{}
	held     chan struct{} // closed once the first EXISTS is held
	cutPipe  error         // when set, pipelines fail so without being sent
	failPipe error         // when set, pipelines fail so, no command's error set
	mu       sync.Mutex
	singles  int        // EXISTS sent alone
	pipes    [][]string // each pipeline's command names
	once     sync.Once
}

func newUsedHook() *usedHook {
	return &usedHook{hold: make(chan struct{}), held: make(chan struct{})}
}

func (h *usedHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *usedHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "exists" {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.singles++
		first := h.singles == 1
		h.mu.Unlock()
		if first {
			h.once.Do(func() { close(h.held) })
			select {
			case <-h.hold:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *usedHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, c := range cmds {
			names = append(names, c.Name())
		}
		if !slices.Contains(names, "exists") {
			return next(ctx, cmds) // a new connection's handshake
		}
		h.mu.Lock()
		h.pipes = append(h.pipes, names)
		cut, fail := h.cutPipe, h.failPipe
		h.mu.Unlock()
		if fail != nil {
			return fail // as a hook that short-circuits may: Process would stamp it, a pipeline does not
		}
		if cut != nil {
			for _, c := range cmds {
				c.SetErr(cut)
			}
			return cut
		}
		return next(ctx, cmds)
	}
}

func (h *usedHook) sent() (int, [][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.singles, slices.Clone(h.pipes)
}

// usedAnswer is what one Used call returned.
type usedAnswer struct {
	key  string
	used bool
	err  error
}

// usedRig is a Store on a hooked client, with keys k0..k<n-1>, the even
// ones used (claimed), and the first read held in flight.
type usedRig struct {
	t    *testing.T
	s    *idempotency.Store
	hook *usedHook
}

func newUsedRig(t *testing.T, keys int) *usedRig {
	rdb := testenv.Redis(t)
	s := idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("used") + ":"})
	fp := idempotency.Fingerprint("POST", "/p", []byte(`{}`))
	for i := 0; i < keys; i += 2 {
		if _, _, err := s.Begin(context.Background(), "u", "/p", fmt.Sprintf("k%d", i), fp); err != nil {
			t.Fatal(err)
		}
	}
	h := newUsedHook()
	rdb.AddHook(h)
	t.Cleanup(func() {
		select {
		case <-h.hold:
		default:
			close(h.hold)
		}
	})
	return &usedRig{t: t, s: s, hook: h}
}

// used calls Used for key in a goroutine; its answer comes on the channel.
func (r *usedRig) used(ctx context.Context, key string) <-chan usedAnswer {
	out := make(chan usedAnswer, 1)
	go func() {
		u, err := r.s.Used(ctx, "u", "/p", key)
		out <- usedAnswer{key, u, err}
	}()
	return out
}

// holdFirst sends a read of "first" and waits until the hook holds it.
func (r *usedRig) holdFirst(ctx context.Context) <-chan usedAnswer {
	out := r.used(ctx, "first")
	select {
	case <-r.hook.held:
	case <-time.After(30 * time.Second):
		r.t.Fatal("the first read never reached Redis")
	}
	return out
}

// queue sends reads of keys k0..k<n-1> and waits until all wait behind the
// one held.
func (r *usedRig) queue(ctx context.Context, n int) []<-chan usedAnswer {
	var outs []<-chan usedAnswer
	for i := range n {
		outs = append(outs, r.used(ctx, fmt.Sprintf("k%d", i)))
	}
	if !testkit.Poll(30*time.Second, func() bool { return idempotency.UsedWaiting(r.s) == n }) {
		r.t.Fatalf("%d of %d reads wait behind the one in flight", idempotency.UsedWaiting(r.s), n)
	}
	return outs
}

func answer(t *testing.T, ch <-chan usedAnswer) usedAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("a read of Used was never answered")
		return usedAnswer{}
	}
}

// wantKeyAnswers checks the answers of reads of k0..k<n-1>, in order: the
// even keys used, the odd ones not.
func wantKeyAnswers(t *testing.T, outs []<-chan usedAnswer) {
	t.Helper()
	for i, ch := range outs {
		if a := answer(t, ch); a.err != nil || a.used != (i%2 == 0) {
			t.Errorf("%s: used %v, %v; want %v", a.key, a.used, a.err, i%2 == 0)
		}
	}
}

// TestUsedReadsWaitingBehindOneGoInOnePipeline: the reads that arrive
// while one is in flight are sent together, in one pipeline, once it ends,
// and each gets its own key's answer.
func TestUsedReadsWaitingBehindOneGoInOnePipeline(t *testing.T) {
	r := newUsedRig(t, 6)
	ctx := context.Background()
	first := r.holdFirst(ctx)
	outs := r.queue(ctx, 6)
	close(r.hook.hold)
	if a := answer(t, first); a.err != nil || a.used {
		t.Fatalf("the read held in flight: used %v, %v; want false, nil", a.used, a.err)
	}
	wantKeyAnswers(t, outs)
	singles, pipes := r.hook.sent()
	if singles != 1 || len(pipes) != 1 || len(pipes[0]) != 6 {
		t.Fatalf("sent %d EXISTS alone and pipelines %v; want the held one alone and the six waiting in one pipeline", singles, pipes)
	}
	// The queue is idle again: the next read goes alone.
	if u, err := r.s.Used(ctx, "u", "/p", "k0"); err != nil || !u {
		t.Fatalf("a read after the pipeline: %v, %v; want true", u, err)
	}
	if singles, _ := r.hook.sent(); singles != 2 {
		t.Fatalf("the read after the pipeline was not sent alone (%d EXISTS alone in all)", singles)
	}
}

// TestUsedReaderWhoLeavesWhileWaitingIsNotSent: a waiting read whose
// request ends returns at once, unavailable, and is left out of the
// pipeline; the others are answered.
func TestUsedReaderWhoLeavesWhileWaitingIsNotSent(t *testing.T) {
	r := newUsedRig(t, 4)
	ctx := context.Background()
	first := r.holdFirst(ctx)
	outs := r.queue(ctx, 3)
	gone, leave := context.WithCancel(ctx)
	leaver := r.used(gone, "k3")
	if !testkit.Poll(30*time.Second, func() bool { return idempotency.UsedWaiting(r.s) == 4 }) {
		t.Fatal("the fourth read does not wait")
	}
	leave()
	if a := answer(t, leaver); !errors.Is(a.err, idempotency.ErrUnavailable) || !errors.Is(a.err, context.Canceled) {
		t.Fatalf("a waiting read whose request ended: %v; want unavailable, cancelled (while the read ahead is still held)", a.err)
	}
	close(r.hook.hold)
	answer(t, first)
	wantKeyAnswers(t, outs)
	if _, pipes := r.hook.sent(); len(pipes) != 1 || len(pipes[0]) != 3 {
		t.Fatalf("pipelines %v; want one of the three readers still waiting", pipes)
	}
}

// TestUsedReadsOutliveTheReadAheadOfThem: the read in flight ends with its
// request (its reply never came); the reads waiting behind it still go, and
// a pipeline that fails answers each of its readers unavailable and leaves
// the queue usable.
func TestUsedReadsOutliveTheReadAheadOfThem(t *testing.T) {
	r := newUsedRig(t, 4)
	ahead, end := context.WithCancel(context.Background())
	first := r.holdFirst(ahead)
	outs := r.queue(context.Background(), 4)
	end()
	if a := answer(t, first); !errors.Is(a.err, idempotency.ErrUnavailable) {
		t.Fatalf("the read whose request ended: %v; want unavailable", a.err)
	}
	wantKeyAnswers(t, outs)

	// A pipeline cut: each of its readers hears unavailable.
	r.hook.mu.Lock()
	r.hook.singles = 0 // the next read alone is held again
	r.hook.hold, r.hook.held, r.hook.once = make(chan struct{}), make(chan struct{}), sync.Once{}
	r.hook.cutPipe = errors.New("connection cut")
	r.hook.mu.Unlock()
	first = r.holdFirst(context.Background())
	outs = r.queue(context.Background(), 3)
	close(r.hook.hold)
	answer(t, first)
	for _, ch := range outs {
		if a := answer(t, ch); !errors.Is(a.err, idempotency.ErrUnavailable) {
			t.Errorf("%s in a cut pipeline: used %v, %v; want unavailable", a.key, a.used, a.err)
		}
	}
	r.hook.mu.Lock()
	r.hook.cutPipe = nil
	r.hook.mu.Unlock()
	if u, err := r.s.Used(context.Background(), "u", "/p", "k2"); err != nil || !u {
		t.Fatalf("a read after the cut pipeline: %v, %v; want true", u, err)
	}
}

// panicHook panics on the first EXISTS, as a faulty hook or client would.
type panicHook struct{ once sync.Once }

func (h *panicHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *panicHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "exists" {
			h.once.Do(func() { panic("exists panicked") })
		}
		return next(ctx, cmd)
	}
}

func (h *panicHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestUsedReadThatPanicsLeavesTheQueueIdle: a read sent alone that panics
// (the request's recoverer answers it) must not leave the queue marked in
// flight, or every later read would wait behind it until its deadline.
func TestUsedReadThatPanicsLeavesTheQueueIdle(t *testing.T) {
	rdb := testenv.Redis(t)
	s := idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("used") + ":"})
	rdb.AddHook(&panicHook{})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the hooked read did not panic")
			}
		}()
		_, _ = s.Used(context.Background(), "u", "/p", "k0")
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan error, 1)
	go func() {
		_, err := s.Used(ctx, "u", "/p", "k0")
		out <- err
	}()
	var err error
	answered := func() bool {
		select {
		case err = <-out:
			return true
		default:
			return false
		}
	}
	// Either it is answered, or it waits behind a read no longer in flight.
	if !testkit.Poll(30*time.Second, func() bool { return answered() || idempotency.UsedWaiting(s) > 0 }) {
		t.Fatal("the read after the panic was neither answered nor queued")
	}
	if idempotency.UsedWaiting(s) > 0 {
		t.Fatal("the read after a panicked read waits behind it: the queue stays busy for ever")
	}
	if err != nil {
		t.Fatalf("the read after the panic: %v", err)
	}
}

// TestUsedPipelineThatFailsAsAWholeIsUnavailable: a pipeline that fails
// without an error on each command (a hook that returns one without
// calling on) answers each of its readers unavailable, not "never used":
// a used key read as never used is refused for good, sold out, where its
// stored answer should have been replayed.
func TestUsedPipelineThatFailsAsAWholeIsUnavailable(t *testing.T) {
	r := newUsedRig(t, 4)
	r.hook.mu.Lock()
	r.hook.failPipe = errors.New("pipeline refused")
	r.hook.mu.Unlock()
	ctx := context.Background()
	first := r.holdFirst(ctx)
	outs := r.queue(ctx, 4)
	close(r.hook.hold)
	answer(t, first)
	for _, ch := range outs {
		if a := answer(t, ch); !errors.Is(a.err, idempotency.ErrUnavailable) {
			t.Errorf("%s in a pipeline that failed: used %v, %v; want unavailable", a.key, a.used, a.err)
		}
	}
}

// TestUsedWaitingReadsGoAloneWhenTheReadAheadStalls: a read ahead that
// never comes back (its pooled connection dead, a node of a Cluster
// unreachable) holds the reads waiting behind it only until their
// patience runs out: then each goes alone, on a connection of its own, and
// is answered while the read ahead is still held; and a read that arrives
// while the queue is stalled goes alone at once.
func TestUsedWaitingReadsGoAloneWhenTheReadAheadStalls(t *testing.T) {
	r := newUsedRig(t, 4)
	stall := make(chan time.Time)
	idempotency.SetUsedStall(r.s, stall)
	ctx := context.Background()
	first := r.holdFirst(ctx)
	outs := r.queue(ctx, 4)
	close(stall)
	wantKeyAnswers(t, outs)
	idempotency.SetUsedStall(r.s, nil)
	gaveUp := idempotency.UsedWaiting(r.s) // still queued, to be left out
	late := r.used(ctx, "k0")
	var a usedAnswer
	answered := func() bool {
		select {
		case a = <-late:
			return true
		default:
			return false
		}
	}
	if !testkit.Poll(30*time.Second, func() bool { return answered() || idempotency.UsedWaiting(r.s) > gaveUp }) {
		t.Fatal("a read while the queue is stalled was neither answered nor queued")
	}
	if idempotency.UsedWaiting(r.s) > gaveUp {
		t.Fatal("a read that arrived while the queue is stalled waits behind the stalled read")
	}
	if a.err != nil || !a.used {
		t.Fatalf("a read while the queue is stalled: used %v, %v; want true", a.used, a.err)
	}
	select {
	case <-first:
		t.Fatal("the read ahead was answered while held")
	default:
	}
	close(r.hook.hold)
	answer(t, first)
	if singles, pipes := r.hook.sent(); singles != 6 || len(pipes) != 0 {
		t.Fatalf("sent %d EXISTS alone and pipelines %v; want six alone (the held one, four that gave up, the late one) and no pipeline", singles, pipes)
	}
	// Once the stalled read ends, the queue gathers again.
	if u, err := r.s.Used(ctx, "u", "/p", "k1"); err != nil || u {
		t.Fatalf("a read after the stall: %v, %v; want false", u, err)
	}
}
