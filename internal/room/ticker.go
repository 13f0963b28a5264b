package room

import (
	"context"
	"time"
)

// The admission step of each room in use on this instance: every Step
// (or a pass's worth of time at the room's rate, if longer), unless news
// from another instance's step came meanwhile, so a fleet steps a room
// about once per interval between them. A room nobody asked about for
// Idle stops stepping here: cost follows activity.

// startTicking starts the room's step loop if it is not running.
func (m *Manager) startTicking(id int64, v *view) {
	v.mu.Lock()
	if v.ticking || m.ctx.Err() != nil {
		v.mu.Unlock()
		return
	}
	v.ticking = true
	v.mu.Unlock()
	m.wg.Add(1)
	go m.tick(id, v)
}

// interval is the time between two steps of the room: a pass's worth of
// time at its rate, at least Step and at most four of them.
func (m *Manager) interval(st State) time.Duration {
	d := m.opts.Step
	if st.Rate > 0 {
		d = max(d, min(time.Second/time.Duration(st.Rate), 4*m.opts.Step))
	}
	return d
}

func (m *Manager) tick(id int64, v *view) {
	defer m.wg.Done()
	t := time.NewTimer(m.opts.Step)
	defer t.Stop()
	for {
		kicked := false
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		case <-v.kick:
			kicked = true
		}
		v.mu.Lock()
		every := m.interval(v.st)
		if time.Since(v.used) > m.opts.Idle || v.st.Epoch == 0 && !v.noneUntil.IsZero() {
			v.ticking = false
			v.mu.Unlock()
			return
		}
		heard := time.Since(v.newsAt) < every
		v.mu.Unlock()
		if kicked || !heard {
			ctx, cancel := context.WithTimeout(m.ctx, time.Second)
			if _, err := m.step(ctx, id, v, m.soldOut(ctx, id)); err != nil && m.ctx.Err() == nil {
				m.opts.Log.Debug("waiting room step failed", "item", id, "err", err)
			}
			cancel()
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(every)
	}
}

// soldOut reads whether the item has units left: "1" none, "0" some, "-1"
// unknown (no Stock reader, or it failed).
func (m *Manager) soldOut(ctx context.Context, id int64) string {
	if m.opts.Stock == nil {
		return "-1"
	}
	n, err := m.opts.Stock(ctx, id)
	if err != nil {
		m.opts.Log.Debug("waiting room stock read failed", "item", id, "err", err)
		return "-1"
	}
	if n <= 0 {
		return "1"
	}
	return "0"
}

// Kick asks the room's step to run now rather than at its next interval:
// a pass holder bought, and the room may be sold out.
func (m *Manager) Kick(id int64) {
	m.mu.Lock()
	v, ok := m.rooms[id]
	m.mu.Unlock()
	if ok {
		select {
		case v.kick <- struct{}{}:
		default:
		}
	}
}

// Settle runs the room's admission step now, with the stock read: a pass
// holder bought, and the room may be sold out. The caller holds the
// buyer's answer until it returns, so that a waiting buyer's poll sent
// after the last sale's answer hears sold-out, at any instance: when the
// room is sold out, Settle waits (at most Options.AckWait) until every
// instance subscribed to the news has acknowledged it (acks.go).
func (m *Manager) Settle(ctx context.Context, id int64) error {
	m.mu.Lock()
	v, ok := m.rooms[id]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	ack, wait := m.acks.expect()
	defer m.acks.forget(ack)
	_, asked, err := m.stepAsking(ctx, id, v, m.soldOut(ctx, id), ack)
	if err != nil || asked <= 0 {
		return err
	}
	return m.awaitAcks(ctx, id, asked, wait, "sell-out")
}

// SoldOut tells the room that the item is sold out (a pass holder's buy
// was answered so): it stops admitting until a step reads units again.
func (m *Manager) SoldOut(ctx context.Context, id int64) error {
	m.mu.Lock()
	v, ok := m.rooms[id]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	_, err := m.step(ctx, id, v, "1")
	return err
}
