package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/room"
)

// The waiting room's routes (package room, docs/room.md): join and poll,
// the room as the dashboard shows it, the admin's setting, and the pass
// check in front of a buy.

// errPassRequired is a buy of an item with a room, without a pass.
var errPassRequired = errors.New("this item's sale has a waiting room: join it for a pass")

// RoomLimit counts a join or a poll of buyer against the buy's rate limit
// (per account and per address, as the limit is set); it returns a
// ratelimit error for one over it.
type RoomLimit func(ctx context.Context, o inventory.Order) error

// roomBuyer reads a join's or a poll's item and body, and counts the
// buyer against the rate limit; on a refusal it answers and returns false.
func (s *server) roomBuyer(c *gin.Context, limit RoomLimit, body any, user func() string) (int64, bool) {
	id, ok := s.itemID(c)
	if !ok {
		return 0, false
	}
	if err := decodeJSON(c, body); err != nil {
		s.writeError(c, err)
		return 0, false
	}
	req := inventory.Request{ItemID: id, UserID: user(), Quantity: 1}
	if err := req.Validate(); err != nil {
		s.writeError(c, err)
		return 0, false
	}
	if limit != nil {
		ctx := inventory.WithClientAddr(c.Request.Context(), clientAddr(c.Request, s.trusted))
		if err := limit(ctx, inventory.Order{ItemID: id, UserID: req.UserID}); err != nil {
			s.writeError(c, err)
			return 0, false
		}
	}
	return id, true
}

func (s *server) handleJoin(rooms *room.Manager, limit RoomLimit) gin.HandlerFunc {
	return func(c *gin.Context) {
		var b api.RoomJoin
		id, ok := s.roomBuyer(c, limit, &b, func() string { return b.UserID })
		if !ok {
			return
		}
		ticket, at, st, err := rooms.Join(c.Request.Context(), id, b.UserID)
		if err != nil {
			s.writeError(c, err)
			return
		}
		retryAfterOf(c, st)
		c.Header("Location", "/api/v1/products/"+strconv.FormatInt(id, 10)+"/room")
		s.writeJSON(c, http.StatusCreated, api.RoomTicket{Ticket: ticket, ArrivedAt: at, RoomStatus: roomStatus(st)})
	}
}

func (s *server) handlePoll(rooms *room.Manager, limit RoomLimit) gin.HandlerFunc {
	return func(c *gin.Context) {
		var b api.RoomPoll
		id, ok := s.roomBuyer(c, limit, &b, func() string { return b.UserID })
		if !ok {
			return
		}
		if b.Ticket == "" {
			s.writeError(c, fieldError("ticket is required"))
			return
		}
		st, err := rooms.Poll(c.Request.Context(), id, b.UserID, b.Ticket)
		if err != nil {
			s.writeError(c, err)
			return
		}
		retryAfterOf(c, st)
		s.writeJSON(c, http.StatusOK, roomStatus(st))
	}
}

// retryAfterOf says when to poll again in Retry-After: whole seconds, as
// HTTP has it, rounded up (poll_after_ms may say less).
func retryAfterOf(c *gin.Context, st room.Status) {
	c.Header("Retry-After", strconv.Itoa(max(1, int((st.PollAfter+time.Second-1)/time.Second))))
}

func roomStatus(st room.Status) api.RoomStatus {
	out := api.RoomStatus{State: st.State, Place: st.Place, Position: st.Position, NowAdmitting: st.NowAdmitting,
		EstimatedWaitMS: max(0, st.Wait.Milliseconds()), PollAfterMS: st.PollAfter.Milliseconds(), Pass: st.Pass}
	if st.Pass != "" {
		out.PassExpiresAt = &st.PassExpires
	}
	return out
}

func (s *server) handleRoom(rooms *room.Manager) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.itemID(c)
		if !ok {
			return
		}
		l, err := rooms.Get(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.writeJSON(c, http.StatusOK, roomOf(id, l))
	}
}

func roomOf(id int64, l room.Look) api.Room {
	return api.Room{ProductID: id, Epoch: l.Epoch, PassesPerSecond: l.Rate, MaxInside: l.Max, ShuffleMS: l.Shuffle, PassTTLMS: l.PassMS,
		OpensAt: time.UnixMilli(l.OpensMS).UTC(), Joined: l.Next, NowAdmitting: l.Admitted, Inside: l.Inside(), Waiting: max(0, l.Next-l.Admitted),
		Drawn: l.Drawn >= 0, SoldOut: l.SoldOut, OldestWaitMS: l.OldestWait.Milliseconds(), ServerTime: time.UnixMilli(l.NowMS).UTC()}
}

// handleSetRoom sets a product's room. Its opening is opens_at, else the
// product's sale window's, else now.
func (s *server) handleSetRoom(rooms *room.Manager, products *inventory.Service) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.itemID(c)
		if !ok {
			return
		}
		var b api.RoomSettings
		if err := decodeJSON(c, &b); err != nil {
			s.writeError(c, err)
			return
		}
		it, err := products.Get(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		set := room.Settings{Rate: b.PassesPerSecond, MaxInside: b.MaxInside, Shuffle: time.Duration(b.ShuffleMS) * time.Millisecond,
			PassTTL: time.Duration(b.PassTTLMS) * time.Millisecond, OpensAt: it.Window.OpensAt}
		if b.OpensAt != nil {
			set.OpensAt = *b.OpensAt
		}
		if _, err := rooms.Set(c.Request.Context(), id, set); err != nil {
			if errors.Is(err, room.ErrInvalid) {
				err = fieldError("%s", err)
			}
			s.writeError(c, err)
			return
		}
		l, err := rooms.Get(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.log.Info("waiting room set", "id", id, "passes_per_second", b.PassesPerSecond, "max_inside", b.MaxInside, "shuffle_ms", b.ShuffleMS)
		s.writeJSON(c, http.StatusOK, roomOf(id, l))
	}
}

func (s *server) handleRemoveRoom(rooms *room.Manager) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.itemID(c)
		if !ok {
			return
		}
		if err := rooms.Remove(c.Request.Context(), id); err != nil {
			s.writeError(c, err)
			return
		}
		s.log.Info("waiting room removed", "id", id)
		s.writeJSON(c, http.StatusOK, api.RoomRemoved{ProductID: id})
	}
}

// roomPass is the pass check of a buy, between what readBuy read and the
// Idempotency-Key claim: after the remembered sell-out (a buy answered
// from memory runs no check: a sold-out item answers 409 whatever the
// pass), before the claim's fold takes a unit. A buy of an item with a
// room needs a valid pass, spent here; a buy answered 503, 429 or a 4xx
// for its input before it ran gives the pass back. A spent pass is
// refused unless the buy carries the Idempotency-Key of the buy that spent
// it: that is its retry, and the key's record answers it.
func (s *server) roomPass(rooms *room.Manager) gin.HandlerFunc {
	return func(c *gin.Context) {
		in := buyOf(c)
		if rooms == nil || in == nil || in.stageErr != nil || in.remembered != nil || in.keyedMemory != nil || in.reqErr != nil {
			return
		}
		ctx, id := c.Request.Context(), in.req.ItemID
		has, err := rooms.Has(ctx, id)
		if err != nil || !has {
			if err != nil {
				s.writeError(c, err)
			}
			return
		}
		pass, key := c.GetHeader(api.PassHeader), c.GetHeader("Idempotency-Key")
		if pass == "" {
			c.Header("Link", fmt.Sprintf("</api/v1/products/%d/room/join>; rel=\"waiting-room\"", id))
			s.writeError(c, errPassRequired)
			return
		}
		spent, err := rooms.Spend(ctx, id, in.req.UserID, pass, key)
		var again *room.SpentError
		if errors.As(err, &again) && key != "" && again.Key == key {
			c.Request = c.Request.WithContext(inventory.WithPass(ctx))
			return // the retry of the buy that spent it
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		c.Request = c.Request.WithContext(inventory.WithPass(ctx))
		// The answer is held until the room has heard what the buy did:
		// the buyer of the last unit hears "bought" only once the room
		// says "sold out" to the next poll.
		w := &heldWriter{ResponseWriter: c.Writer}
		c.Writer = w
		// A panic goes on to the recoverer, which answers on the writer
		// underneath; the held answer is dropped.
		defer func() { c.Writer = w.ResponseWriter }()
		c.Next()
		s.afterPass(c, rooms, id, spent)
		if err := w.release(); err != nil {
			s.log.Debug("writing a pass holder's answer failed", "err", err)
		}
	}
}

// heldWriter keeps an answer until release.
type heldWriter struct {
	gin.ResponseWriter
	buf []byte
}

func (w *heldWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	return len(b), nil
}

func (w *heldWriter) WriteString(s string) (int, error) {
	w.buf = append(w.buf, s...)
	return len(s), nil
}

// WriteHeaderNow sends nothing while the answer is held.
func (w *heldWriter) WriteHeaderNow() {}

func (w *heldWriter) release() error {
	w.ResponseWriter.WriteHeaderNow()
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.ResponseWriter.Write(w.buf)
	return err
}

// afterPass gives the pass back when its buy did not run, and tells the
// room what a buy that ran learnt of the stock.
func (s *server) afterPass(c *gin.Context, rooms *room.Manager, id int64, spent room.Spent) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), time.Second)
	defer cancel()
	status, problem := c.Writer.Status(), c.GetString(problemKey)
	switch {
	case status >= 500, status == http.StatusTooManyRequests, status == http.StatusBadRequest, status == http.StatusRequestEntityTooLarge,
		status == http.StatusUnsupportedMediaType, status == http.StatusUnprocessableEntity:
		if err := rooms.Unspend(ctx, spent); err != nil {
			s.log.Warn("giving a waiting room's pass back failed; it stays spent", "id", id, "err", err)
		}
	case problem == "sold-out":
		if err := rooms.SoldOut(ctx, id); err != nil {
			s.log.Debug("telling the waiting room of a sell-out failed; its next step reads the stock", "id", id, "err", err)
		}
	case status < 300:
		// The last unit may have gone: the room reads the stock now.
		if err := rooms.Settle(ctx, id); err != nil {
			s.log.Debug("the waiting room's step after a sale failed; its next step reads the stock", "id", id, "err", err)
		}
	}
}
