package room

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/join.lua
var joinSource string

//go:embed scripts/spend.lua
var spendSource string

//go:embed scripts/unspend.lua
var unspendSource string

var (
	joinScript    = redis.NewScript(joinSource)
	spendScript   = redis.NewScript(spendSource)
	unspendScript = redis.NewScript(unspendSource)
)

// The states a poll answers.
const (
	StateDrawing  = "drawing"
	StateWaiting  = "waiting"
	StateAdmitted = "admitted"
	StateSoldOut  = "sold-out"
)

// Status is what a join or a poll tells the buyer.
type Status struct {
	State string
	// Place is the ticket's place in the line (after the draw); 0 while
	// drawing.
	Place        int64
	Position     int64 // places ahead, counting its own; 0 once admitted
	NowAdmitting int64
	Wait         time.Duration // estimated
	PollAfter    time.Duration
	Pass         string // when admitted
	PassExpires  time.Time
}

// Join gives buyer a place in item id's room and its ticket. It returns
// ErrNoRoom, ErrUnavailable, or the context's error.
func (m *Manager) Join(ctx context.Context, id int64, buyer string) (string, time.Time, Status, error) {
	v, _, err := m.state(ctx, id)
	if err != nil {
		return "", time.Time{}, Status{}, err
	}
	res, err := joinScript.Run(ctx, m.opts.RDB, m.keys(id)[:1], seed()).Int64Slice()
	if err == nil && res[0] < 0 {
		if _, err = m.restore(ctx, id, v); err == nil {
			res, err = joinScript.Run(ctx, m.opts.RDB, m.keys(id)[:1], seed()).Int64Slice()
		}
	}
	if err != nil {
		return "", time.Time{}, Status{}, unavailable(err)
	}
	if res[0] < 0 {
		return "", time.Time{}, Status{}, ErrNoRoom
	}
	m.joins.Add(1)
	t := Token{Kind: KindTicket, Item: id, Epoch: res[1], Place: res[2], Early: res[3] == 1, At: res[4], Buyer: buyer}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.st.Epoch == t.Epoch {
		v.st.Next = max(v.st.Next, t.Place)
		if v.st.Drawn < 0 && res[5] >= 0 {
			v.st.Drawn, v.st.Seed = res[5], res[6]
		}
	}
	st, err := m.status(v, t)
	return m.opts.Signer.Sign(t), time.UnixMilli(t.At).UTC(), st, err
}

// Poll answers a ticket of buyer for item id from this instance's memory
// of the room: no round trip while the room's news is fresh. It returns
// the token errors (ErrMalformed, ErrForged, ErrWrongItem, ErrWrongBuyer,
// ErrExpired for a room replaced since, or a turn that passed unused),
// ErrNoRoom or ErrUnavailable.
func (m *Manager) Poll(ctx context.Context, id int64, buyer, ticket string) (Status, error) {
	t, err := m.check(ticket, KindTicket, id, buyer)
	if err != nil {
		return Status{}, err
	}
	v, _, err := m.state(ctx, id)
	if err != nil {
		return Status{}, err
	}
	m.polls.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	if t.Epoch != v.st.Epoch {
		return Status{}, fmt.Errorf("%w: the ticket is for an earlier room of item %d", ErrExpired, id)
	}
	return m.status(v, t)
}

// check verifies a token's signature, kind, item and buyer.
func (m *Manager) check(tok string, kind Kind, id int64, buyer string) (Token, error) {
	t, err := m.opts.Signer.Verify(tok, kind)
	switch {
	case err != nil:
		return Token{}, err
	case t.Item != id:
		return Token{}, fmt.Errorf("%w: signed for item %d", ErrWrongItem, t.Item)
	case t.Buyer != buyer:
		return Token{}, ErrWrongBuyer
	}
	return t, nil
}

// status is what ticket t's holder is told, from v (held).
func (m *Manager) status(v *view, t Token) (Status, error) {
	st, now := v.st, v.nowMS()
	out := Status{NowAdmitting: st.Admitted}
	if st.SoldOut {
		out.State, out.PollAfter = StateSoldOut, 5*time.Second
		return out, nil
	}
	p, ok := v.place(t)
	if !ok {
		out.State = StateDrawing
		out.Wait = time.Duration(st.OpensMS+st.Shuffle-now) * time.Millisecond
		out.PollAfter = min(max(out.Wait, 250*time.Millisecond), 10*time.Second)
		return out, nil
	}
	out.Place = p
	if p > st.Admitted {
		out.State, out.Position = StateWaiting, p-st.Admitted
		out.Wait = time.Duration(out.Position) * time.Second / time.Duration(max(st.Rate, 1))
		if st.Drawn < 0 || st.OpensMS+st.Shuffle > now {
			out.Wait += time.Duration(st.OpensMS+st.Shuffle-now) * time.Millisecond
		}
		out.PollAfter = pollAfter(out.Wait)
		return out, nil
	}
	if p <= st.Expired {
		return Status{}, fmt.Errorf("%w: place %d was admitted and its pass ran out unused", ErrExpired, p)
	}
	at := v.admittedAt(p)
	pass := Token{Kind: KindPass, Item: t.Item, Epoch: t.Epoch, Place: p, At: at, Expires: at + st.PassMS, Buyer: t.Buyer}
	if pass.Expires <= now {
		return Status{}, fmt.Errorf("%w: place %d was admitted and its pass ran out unused", ErrExpired, p)
	}
	out.State, out.Pass, out.PassExpires = StateAdmitted, m.opts.Signer.Sign(pass), time.UnixMilli(pass.Expires).UTC()
	out.PollAfter = time.Duration(pass.Expires-now) * time.Millisecond
	return out, nil
}

// pollAfter is when a waiting buyer should poll again: a near place soon
// (250ms within 2s of its turn), a far one at a tenth of its wait, at
// most every 10s.
func pollAfter(wait time.Duration) time.Duration {
	if wait <= 2*time.Second {
		return 250 * time.Millisecond
	}
	return min(wait/10, 10*time.Second)
}

// ErrSpent is a pass already spent by another buy.
var ErrSpent = errors.New("pass already spent")

// SpentError is a spent pass, with the Idempotency-Key of the buy that
// spent it ("" for none): a buy with that same key is its retry, and
// hears that buy's answer.
type SpentError struct{ Key string }

func (e *SpentError) Error() string { return ErrSpent.Error() }
func (e *SpentError) Unwrap() error { return ErrSpent }

// Spent is a pass spent by a buy, to give back if the buy did not run.
type Spent struct {
	id    int64
	place int64
	key   string
}

// Has reports whether item id has a room, from memory when known (an
// item without one is asked about again after a second). When Redis
// cannot say, an item this instance knows no room of has none for a
// second: a Redis outage must not refuse, nor slow, the buys of the
// stages that do not need Redis; an item it knows a room of answers the
// error.
func (m *Manager) Has(ctx context.Context, id int64) (bool, error) {
	v, _, err := m.state(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNoRoom):
		return false, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.st.Epoch > 0 {
		return false, err
	}
	v.noneUntil = time.Now().Add(time.Second)
	return false, nil
}

// Spend spends pass for buyer's buy of item id under Idempotency-Key key
// ("" for none). It returns the token errors, ErrExpired (past its
// validity, or a room replaced since), a *SpentError, ErrNoRoom or
// ErrUnavailable.
func (m *Manager) Spend(ctx context.Context, id int64, buyer, pass, key string) (Spent, error) {
	t, err := m.check(pass, KindPass, id, buyer)
	if err != nil {
		return Spent{}, err
	}
	v, _, err := m.state(ctx, id)
	if err != nil {
		return Spent{}, err
	}
	v.mu.Lock()
	epoch, now := v.st.Epoch, v.nowMS()
	v.mu.Unlock()
	if t.Epoch != epoch || t.Expires <= now {
		return Spent{}, fmt.Errorf("%w: the pass for place %d is no longer valid", ErrExpired, t.Place)
	}
	keys := m.keys(id)
	res, err := spendScript.Run(ctx, m.opts.RDB, []string{keys[0], keys[2], keys[3]}, t.Epoch, t.Place, key).StringSlice()
	if err != nil {
		return Spent{}, unavailable(err)
	}
	switch res[0] {
	case "ok":
		m.spends.Add(1)
		return Spent{id: id, place: t.Place, key: key}, nil
	case "spent":
		return Spent{}, &SpentError{Key: res[1]}
	case "gone":
		return Spent{}, ErrNoRoom
	}
	return Spent{}, fmt.Errorf("%w: the pass for place %d is no longer valid", ErrExpired, t.Place)
}

// Unspend gives a pass back: the buy that spent it did not run.
func (m *Manager) Unspend(ctx context.Context, s Spent) error {
	keys := m.keys(s.id)
	if err := unspendScript.Run(ctx, m.opts.RDB, keys[2:], s.place, s.key).Err(); err != nil {
		return unavailable(err)
	}
	return nil
}
