package room

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/set.lua
var setSource string

//go:embed scripts/remove.lua
var removeSource string

var (
	setScript    = redis.NewScript(setSource)
	removeScript = redis.NewScript(removeSource)
)

// Set sets (or replaces) item id's room: a new, empty room, whose tickets
// and passes of any earlier room are expired. It returns ErrInvalid or
// ErrUnavailable.
func (m *Manager) Set(ctx context.Context, id int64, s Settings) (State, error) {
	if s.PassTTL == 0 {
		s.PassTTL = DefaultPassTTL
	}
	if err := s.Check(); err != nil {
		return State{}, err
	}
	var opens int64
	if !s.OpensAt.IsZero() {
		opens = s.OpensAt.UnixMilli()
	}
	err := setScript.Run(ctx, m.opts.RDB, m.keys(id), s.Rate, s.MaxInside, s.Shuffle.Milliseconds(), s.PassTTL.Milliseconds(), opens,
		NewsChannel, m.newsName(id)).Err()
	if err != nil {
		return State{}, unavailable(err)
	}
	v := m.view(id)
	v.mu.Lock()
	v.newsAt, v.noneUntil = time.Time{}, time.Time{}
	v.mu.Unlock()
	_, st, err := m.state(ctx, id)
	return st, err
}

// Remove removes item id's room: its buys need no pass again. It leaves
// a tombstone, so that an instance that missed the news does not restore
// the room from its memory, and it returns once every instance that
// heard the news acknowledged it (at most Options.AckWait, as a sale's
// Settle), so that no instance answers from its memory of the room after
// the removal was answered. It returns ErrUnavailable or the context's
// error.
func (m *Manager) Remove(ctx context.Context, id int64) error {
	ack, wait := m.acks.expect()
	defer m.acks.forget(ack)
	res, err := removeScript.Run(ctx, m.opts.RDB, m.keys(id), NewsChannel, m.newsName(id), ack).Int64Slice()
	if err != nil {
		return unavailable(err)
	}
	v := m.view(id)
	v.mu.Lock()
	v.forget(res[0])
	v.noneUntil = time.Time{}
	v.mu.Unlock()
	return m.awaitAcks(ctx, id, res[1], wait, "removal")
}

// Look is a room as the dashboard shows it.
type Look struct {
	State
	// OldestWait is how long the first waiting place has waited, as far
	// as this instance can say: from the step that admitted the place
	// before it (0 when nobody waits).
	OldestWait time.Duration
}

// Get returns item id's room; ErrNoRoom when it has none.
func (m *Manager) Get(ctx context.Context, id int64) (Look, error) {
	v, st, err := m.state(ctx, id)
	if err != nil {
		return Look{}, err
	}
	l := Look{State: st}
	v.mu.Lock()
	defer v.mu.Unlock()
	if st.Next > st.Admitted && !st.SoldOut {
		since := st.OpensMS
		if n := len(v.steps); n > 0 {
			since = v.steps[n-1].ms
		}
		l.OldestWait = max(0, time.Duration(v.nowMS()-since)*time.Millisecond)
	}
	return l, nil
}
