package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/reconcile"
)

// itemEndpoints are the endpoints of one kind of item, products or coupon
// batches, as the shared handlers serve them: the kind's service, and how
// the API shows its items and orders (products have orders, coupon batches
// have grabs).
type itemEndpoints struct {
	svc    *inventory.Service
	coupon bool
}

// kind is the kind's name, "product" or "coupon", as reconcile findings
// and burst verdicts say it.
func (ep itemEndpoints) kind() string {
	if ep.coupon {
		return "coupon"
	}
	return "product"
}

// item is an item as the API shows it, with its sale window and the
// reference time now: an api.Product or an api.Coupon.
func (ep itemEndpoints) item(it inventory.Item, now time.Time) any {
	opens, closes := timeOrNil(it.Window.OpensAt), timeOrNil(it.Window.ClosesAt)
	if ep.coupon {
		return api.Coupon{ID: it.ID, Name: it.Name, Total: it.InitialStock, Remaining: it.Stock, InitialStock: it.InitialStock, Stock: it.Stock,
			OpensAt: opens, ClosesAt: closes, ServerTime: now}
	}
	return api.Product{ID: it.ID, Name: it.Name, PriceCents: it.PriceCents, InitialStock: it.InitialStock, Stock: it.Stock,
		OpensAt: opens, ClosesAt: closes, ServerTime: now}
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// items reads what the item answers show: the items, then the reference
// time, so that a window read before the clock is never shown ahead of it.
func (ep itemEndpoints) items(ctx context.Context, read func() ([]inventory.Item, error)) ([]inventory.Item, time.Time, error) {
	items, err := read()
	if err != nil {
		return nil, time.Time{}, err
	}
	now, err := ep.svc.ServerTime(ctx)
	return items, now, err
}

// order is a buy's order (api.Order) or a grab (api.Grab).
func (ep itemEndpoints) order(o inventory.Order) any {
	if ep.coupon {
		return api.Grab{OrderNo: o.No, CouponID: o.ItemID, UserID: o.UserID, Stage: o.Stage, Instance: o.Instance, CreatedAt: o.CreatedAt, Status: o.Status}
	}
	return api.Order{OrderNo: o.No, ProductID: o.ItemID, UserID: o.UserID, Quantity: o.Quantity, Stage: o.Stage, Instance: o.Instance, CreatedAt: o.CreatedAt, Status: o.Status}
}

func (s *server) handleHealth() gin.HandlerFunc {
	return func(c *gin.Context) {
		s.writeJSON(c, http.StatusOK, api.Health{Status: "ok", Instance: s.instance})
	}
}

// handleRedisPing times one round trip to the Redis of the Idempotency-Key
// records. It is the lab's redis-round-trip baseline (the HTTP exchange
// and the one Redis hop every keyed buy pays), and a quick look at that hop
// from this instance.
func (s *server) handleRedisPing(store *idempotency.Store) gin.HandlerFunc {
	return func(c *gin.Context) {
		if store == nil {
			s.writeError(c, errNoRedis)
			return
		}
		start := time.Now()
		if err := store.Ping(c.Request.Context()); err != nil {
			s.writeError(c, err)
			return
		}
		s.writeJSON(c, http.StatusOK, api.RedisPing{Instance: s.instance, RoundTripMS: float64(time.Since(start).Microseconds()) / 1000})
	}
}

func (s *server) handleReady(ready func(context.Context) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		if ready != nil {
			ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
			defer cancel()
			if err := ready(ctx); err != nil {
				s.writeError(c, errors.Join(errNotReady, err))
				return
			}
		}
		s.writeJSON(c, http.StatusOK, api.Health{Status: "ready", Instance: s.instance})
	}
}

func (s *server) handleInfo(products *inventory.Service) gin.HandlerFunc {
	return func(c *gin.Context) {
		s.writeJSON(c, http.StatusOK, api.Info{
			Instance:     s.instance,
			Stage:        *s.stage.Load(),
			Stages:       products.Stages(),
			Admin:        s.adminOn,
			Process:      s.process,
			PIDNamespace: s.pidNamespace,
			LockFair:     s.lockFair,
		})
	}
}

func (s *server) handleGet(ep itemEndpoints) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.itemID(c)
		if !ok {
			return
		}
		it, now, err := ep.one(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.writeJSON(c, http.StatusOK, ep.item(it, now))
	}
}

// one reads one item and the reference time (see items).
func (ep itemEndpoints) one(ctx context.Context, id int64) (inventory.Item, time.Time, error) {
	items, now, err := ep.items(ctx, func() ([]inventory.Item, error) {
		it, err := ep.svc.Get(ctx, id)
		return []inventory.Item{it}, err
	})
	if err != nil {
		return inventory.Item{}, now, err
	}
	return items[0], now, nil
}

func (s *server) handleAudit(ep itemEndpoints, last func(context.Context, string, int64) (reconcile.Finding, bool, error), verdicts Verdicts) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.itemID(c)
		if !ok {
			return
		}
		a, err := ep.svc.Audit(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		out := api.Audit{InitialStock: a.InitialStock, Stock: a.Stock, Sold: a.Sold, Orders: a.Orders, Oversold: a.Oversold(), Conserved: a.Conserved(),
			Paid: a.Paid, Cancelled: a.Cancelled, CancelledOrders: a.CancelledOrders, Failed: a.Failed, Pending: a.Pending, PendingOrders: a.PendingOrders}
		if ep.coupon {
			out.CouponID = a.ItemID
		} else {
			out.ProductID = a.ItemID
		}
		if last != nil {
			out.Reconcile = s.reconcileFor(c.Request.Context(), last, ep, id)
		}
		if verdicts != nil {
			kind := ep.kind()
			// The counts above are the audit; the record of bursts is
			// beside it, and an audit without it is still an answer.
			if v, err := verdicts.Recent(c.Request.Context(), kind, id, recentVerdicts); err != nil {
				s.log.Warn("reading the burst verdicts", "kind", kind, "id", id, "err", err)
			} else {
				out.Bursts = v
			}
		}
		// So is the log of units given back: without it the lab counts
		// every early sold-out as refused with stock, the stricter count.
		if g, err := ep.svc.GivenBack(c.Request.Context(), id); err != nil {
			s.log.Warn("reading the units given back", "kind", ep.kind(), "id", id, "err", err)
		} else {
			for _, e := range g {
				out.GivenBack = append(out.GivenBack, api.GiveBack{ReservedAt: e.ReservedAt, At: e.At, Units: e.Units})
			}
		}
		s.writeJSON(c, http.StatusOK, out)
	}
}

// reconcileFor returns this item's finding from the last reconcile run, or
// nil (none yet, or the item was reset since).
func (s *server) reconcileFor(ctx context.Context, last func(context.Context, string, int64) (reconcile.Finding, bool, error), ep itemEndpoints, id int64) *api.Reconcile {
	kind := ep.kind()
	f, ok, err := last(ctx, kind, id)
	if err != nil {
		s.log.Debug("reading the reconcile result failed", "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	it := f.Item
	r := &api.Reconcile{At: f.At, CheckedAt: f.CheckedAt, Instance: f.Instance, Oversold: it.Oversold, Conserved: it.Conserved, Error: it.Error, Note: it.Note}
	if d := it.Drift; d != nil {
		r.RedisDrift = &api.Drift{RedisStock: d.RedisStock, DBStock: d.DBStock, Resolved: d.Resolved, Busy: d.Busy, Repaired: d.Repaired}
	}
	if d := it.BucketDrift; d != nil {
		r.BucketDrift = &api.Drift{RedisStock: d.RedisStock, DBStock: d.DBStock, Resolved: d.Resolved, Busy: d.Busy, Repaired: d.Repaired}
	}
	return r
}

// buyBody is the body of a buy; a grab has no quantity.
type buyBody struct {
	UserID   *string `json:"user_id"`
	Quantity *int    `json:"quantity"`
}

type grabBody struct {
	UserID *string `json:"user_id"`
}

// buyInput is a buy or grab as readBuy read it, once, for every handler
// after it: the Idempotency-Key claim, its refusal check and handleBuy.
type buyInput struct {
	stage    string
	stageErr error // no stage: an unknown X-Seckill-Stage, or no admin token with it
	// remembered is the answer from this instance's memory to a keyless
	// buy of an item it knows is sold out or outside its sale window: the
	// request was not read further. countRemembered counts it when the
	// buy hears it (not a 400 for its missing key).
	remembered      error
	countRemembered func()
	// keyedMemory is that answer for a valid keyed buy, which hears it
	// only if its key was never used (see answeredFromMemory); svc is
	// the service whose memory said so.
	keyedMemory error
	svc         *inventory.Service
	body        []byte // the raw body, for the key's fingerprint
	bodyErr     error  // the body could not be read (too large, cut off)
	req         inventory.Request
	reqErr      error // not a valid buy: the path, the body or a field (bodyErr included)
	// fold is the Idempotency-Key claim's fold of the buy, set once the
	// claim ran it (claimKey); nil for a buy without one.
	fold *inventory.Fold
}

// buyInputKey is where readBuy leaves the buyInput.
const buyInputKey = "seckill.buy"

// readBuy reads a buy or grab at ep once: the stage it runs under, its
// body and the request in it. Errors are not answered here but kept for
// the handlers after it, which answer them in their order. It also marks
// every answer, including those the Idempotency-Key check gives before the
// handler runs, with the instance and the stage.
func (s *server) readBuy(ep itemEndpoints) gin.HandlerFunc {
	return func(c *gin.Context) {
		// Straight into the map, under canonical keys, with value slices
		// built once (see stageHeader): every buyer's answer carries both.
		h := c.Writer.Header()
		h[api.InstanceHeader] = s.instanceHeader
		in := &buyInput{}
		if in.stage, in.stageErr = s.stageFor(c, ep.svc); in.stageErr == nil {
			h[api.StageHeader] = stageHeader(in.stage)
			// Most of a flash crowd comes after the sell-out (or before
			// the opening): without a key to honour, its answer needs
			// neither the body nor a round trip.
			if id, err := pathID(c); err == nil && c.GetHeader("Idempotency-Key") == "" {
				if in.countRemembered, in.remembered = ep.svc.PeekMemory(c.Request.Context(), in.stage, id); in.remembered != nil {
					c.Set(buyInputKey, in)
					return
				}
			}
		}
		c.Request = c.Request.WithContext(inventory.WithClientAddr(c.Request.Context(), clientAddr(c.Request, s.trusted)))
		in.body, in.bodyErr = readBody(c)
		in.req, in.reqErr = parseBuy(c, ep.coupon, in.body, in.bodyErr)
		if in.stageErr == nil && in.reqErr == nil && c.GetHeader("Idempotency-Key") != "" {
			in.svc = ep.svc
			_, in.keyedMemory = ep.svc.PeekMemory(c.Request.Context(), in.stage, in.req.ItemID)
		}
		c.Set(buyInputKey, in)
	}
}

// buyOf returns what readBuy read, or nil on a route without it.
func buyOf(c *gin.Context) *buyInput {
	v, _ := c.Get(buyInputKey)
	in, _ := v.(*buyInput)
	return in
}

func (s *server) handleBuy(ep itemEndpoints) gin.HandlerFunc {
	return func(c *gin.Context) {
		in := buyOf(c)
		if in.stageErr != nil {
			s.writeError(c, in.stageErr)
			return
		}
		if in.remembered != nil {
			in.countRemembered()
			s.writeError(c, in.remembered)
			return
		}
		if in.reqErr != nil {
			s.writeError(c, in.reqErr)
			return
		}
		o, err := ep.svc.BuyFolded(c.Request.Context(), in.stage, in.req, in.fold)
		if err != nil {
			s.writeError(c, err)
			return
		}
		// Where the order is looked up (orders.go): a 202's buyer follows
		// it to learn whether the order was confirmed.
		c.Header("Location", orderPath(o.No))
		if o.Status == inventory.StatusPending {
			s.writeJSON(c, http.StatusAccepted, ep.order(o))
			return
		}
		s.writeJSON(c, http.StatusCreated, ep.order(o))
	}
}

// parseBuy reads the request of a buy (or a grab, coupon) from its path
// and its body, as read (bodyErr: it could not be). A request whose body
// decoded keeps its user_id even when a field is invalid: the
// Idempotency-Key record is scoped by it.
func parseBuy(c *gin.Context, coupon bool, body []byte, bodyErr error) (inventory.Request, error) {
	id, err := pathID(c)
	if err != nil {
		return inventory.Request{}, err
	}
	req := inventory.Request{ItemID: id, Quantity: 1}
	if err := checkMediaType(c); err != nil {
		return req, err
	}
	if bodyErr != nil {
		return req, bodyErr
	}
	var user *string
	plain, ok := plainBuy(body)
	switch {
	case coupon && ok && plain.Quantity == nil:
		user = plain.UserID
	case coupon:
		var b grabBody
		if err := decodeBody(body, &b); err != nil {
			return req, err
		}
		user = b.UserID
	default:
		b := plain
		if !ok {
			if err := decodeBody(body, &b); err != nil {
				return req, err
			}
		}
		user = b.UserID
		if b.Quantity != nil {
			req.Quantity = *b.Quantity
		}
	}
	if user == nil {
		return req, fieldError("user_id is required")
	}
	req.UserID = *user
	return req, req.Validate()
}

type resetBody struct {
	Stock *int `json:"stock"`
	// OpensAt and ClosesAt set the sale window (RFC 3339); left out or
	// null, the item is on sale at once and for good.
	OpensAt  *time.Time `json:"opens_at"`
	ClosesAt *time.Time `json:"closes_at"`
}

// handleReset resets an item's sale. While a burst of the item is in
// flight anywhere in the fleet it is refused (409 burst-in-progress): the
// reset would empty the stock under the burst's buyers.
func (s *server) handleReset(ep itemEndpoints, marks BurstMarks) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.itemID(c)
		if !ok {
			return
		}
		var b resetBody
		if err := decodeJSON(c, &b); err != nil {
			s.writeError(c, err)
			return
		}
		if b.Stock == nil {
			s.writeError(c, fieldError("stock is required"))
			return
		}
		if err := checkNoBurst(c.Request.Context(), marks, ep.kind(), id); err != nil {
			s.writeError(c, err)
			return
		}
		var w inventory.SaleWindow
		if b.OpensAt != nil {
			w.OpensAt = b.OpensAt.UTC()
		}
		if b.ClosesAt != nil {
			w.ClosesAt = b.ClosesAt.UTC()
		}
		if err := ep.svc.ResetSale(c.Request.Context(), id, *b.Stock, w); err != nil {
			s.writeError(c, err)
			return
		}
		it, now, err := ep.one(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.log.Info("reset", "id", id, "stock", *b.Stock, "coupon", ep.coupon, "opens_at", w.OpensAt, "closes_at", w.ClosesAt)
		s.writeJSON(c, http.StatusOK, ep.item(it, now))
	}
}

// stageBody is a stage switch as read: "mode" is the former name of
// "stage", still accepted.
type stageBody struct {
	Stage string `json:"stage"`
	Mode  string `json:"mode"`
}

// readStage reads a {"stage": ...} body naming a stage this instance can
// run; on a bad one it answers the error and returns false.
func (s *server) readStage(c *gin.Context, svc *inventory.Service) (string, bool) {
	var b stageBody
	if err := decodeJSON(c, &b); err != nil {
		s.writeError(c, err)
		return "", false
	}
	stage, err := aliased("stage", b.Stage, "mode", b.Mode)
	if err == nil && stage == "" {
		err = fieldError("stage is required")
	}
	if err == nil {
		err = checkStage(stage, svc)
	}
	if err != nil {
		s.writeError(c, err)
		return "", false
	}
	return stage, true
}

// aliased merges a field with its former name: either may be given, or
// both when they agree.
func aliased(name, value, alias, aliasValue string) (string, error) {
	switch {
	case aliasValue == "" || aliasValue == value:
		return value, nil
	case value == "":
		return aliasValue, nil
	}
	return "", fieldError("%s %q and its former name %s %q disagree; send %s alone", name, value, alias, aliasValue, name)
}

// itemID reads the :id path parameter; on a bad one it answers the error
// and returns false.
func (s *server) itemID(c *gin.Context) (int64, bool) {
	id, err := pathID(c)
	if err != nil {
		s.writeError(c, err)
		return 0, false
	}
	return id, true
}

func (s *server) handleSetStage(products, coupons *inventory.Service) gin.HandlerFunc {
	return func(c *gin.Context) {
		stage, ok := s.readStage(c, products)
		if !ok {
			return
		}
		if coupons != nil && !coupons.HasStage(stage) {
			s.writeError(c, errStageDisabled)
			return
		}
		s.stage.Store(&stage)
		s.log.Info("default stage changed", "stage", stage)
		s.writeJSON(c, http.StatusOK, api.StageChange{Instance: s.instance, Stage: stage})
	}
}
