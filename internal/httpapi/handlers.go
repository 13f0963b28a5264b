package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/reconcile"
)

// itemKind tells the shared handlers how one kind of item is named on the
// wire: products have orders, coupon batches have grabs.
type itemKind struct {
	svc     *inventory.Service
	idField string // product_id or batch_id
	noField string // order_no or grab_no
	coupon  bool
}

func (k itemKind) itemJSON(it inventory.Item) gin.H {
	h := gin.H{"id": it.ID, "name": it.Name, "initial_stock": it.InitialStock, "stock": it.Stock}
	if k.coupon {
		h["total"], h["remaining"] = it.InitialStock, it.Stock
	} else {
		h["price_cents"] = it.PriceCents
	}
	return h
}

func (k itemKind) orderJSON(o inventory.Order) gin.H {
	h := gin.H{
		k.noField:    o.No,
		k.idField:    o.ItemID,
		"user_id":    o.UserID,
		"stage":      o.Stage,
		"instance":   o.Instance,
		"created_at": o.CreatedAt.Format(time.RFC3339Nano),
	}
	if !k.coupon {
		h["quantity"] = o.Quantity
	}
	return h
}

func (s *server) handleHealth() gin.HandlerFunc {
	return func(c *gin.Context) {
		s.writeJSON(c, http.StatusOK, gin.H{"status": "ok", "instance": s.instance})
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
		s.writeJSON(c, http.StatusOK, gin.H{"status": "ready", "instance": s.instance})
	}
}

func (s *server) handleInfo(products *inventory.Service) gin.HandlerFunc {
	return func(c *gin.Context) {
		s.writeJSON(c, http.StatusOK, gin.H{
			"instance": s.instance,
			"mode":     *s.mode.Load(),
			"stages":   products.Stages(),
			"admin":    s.adminOn,
		})
	}
}

func (s *server) handleList(k itemKind) gin.HandlerFunc {
	return func(c *gin.Context) {
		items, err := k.svc.List(c.Request.Context())
		if err != nil {
			s.writeError(c, err)
			return
		}
		out := make([]gin.H, len(items))
		for i, it := range items {
			out[i] = k.itemJSON(it)
		}
		key := "products"
		if k.coupon {
			key = "coupons"
		}
		s.writeJSON(c, http.StatusOK, gin.H{key: out})
	}
}

func (s *server) handleGet(k itemKind) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, err := pathID(c)
		if err != nil {
			s.writeError(c, err)
			return
		}
		it, err := k.svc.Get(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.writeJSON(c, http.StatusOK, k.itemJSON(it))
	}
}

func (s *server) handleAudit(k itemKind, last func(context.Context) (reconcile.Result, bool, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, err := pathID(c)
		if err != nil {
			s.writeError(c, err)
			return
		}
		a, err := k.svc.Audit(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		out := auditJSON(k, a)
		if last != nil {
			out["reconcile"] = s.reconcileFor(c.Request.Context(), last, k, id)
		}
		s.writeJSON(c, http.StatusOK, out)
	}
}

// reconcileFor picks this item's entry from the last reconcile run, or nil.
func (s *server) reconcileFor(ctx context.Context, last func(context.Context) (reconcile.Result, bool, error), k itemKind, id int64) any {
	res, ok, err := last(ctx)
	if err != nil {
		s.log.Debug("reading the reconcile result failed", "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	kind := "product"
	if k.coupon {
		kind = "coupon"
	}
	for _, it := range res.Items {
		if it.Kind == kind && it.ID == id {
			return gin.H{"at": res.At, "instance": res.Instance, "oversold": it.Oversold, "conserved": it.Conserved, "redis_drift": it.Drift, "error": it.Error}
		}
	}
	return nil
}

func auditJSON(k itemKind, a inventory.Audit) gin.H {
	h := gin.H{
		"product_id":    a.ItemID,
		"initial_stock": a.InitialStock,
		"stock":         a.Stock,
		"sold":          a.Sold,
		"orders":        a.Orders,
		"oversold":      a.Oversold(),
		"conserved":     a.Conserved(),
	}
	if k.coupon {
		delete(h, "product_id")
		h["coupon_id"] = a.ItemID
	}
	return h
}

// buyBody is the body of a buy; a grab has no quantity.
type buyBody struct {
	UserID   *string `json:"user_id"`
	Quantity *int    `json:"quantity"`
}

type grabBody struct {
	UserID *string `json:"user_id"`
}

func (s *server) handleBuy(k itemKind) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Header("X-Seckill-Instance", s.instance)
		stage, err := s.stageFor(c, k.svc)
		if err != nil {
			s.writeError(c, err)
			return
		}
		c.Header("X-Seckill-Mode", stage)
		req, err := parseBuy(c, k.coupon)
		if err != nil {
			s.writeError(c, err)
			return
		}
		o, err := k.svc.Buy(c.Request.Context(), stage, req)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.writeJSON(c, http.StatusCreated, k.orderJSON(o))
	}
}

func parseBuy(c *gin.Context, coupon bool) (inventory.Request, error) {
	id, err := pathID(c)
	if err != nil {
		return inventory.Request{}, err
	}
	req := inventory.Request{ItemID: id, Quantity: 1}
	var user *string
	if coupon {
		var b grabBody
		if err := decodeJSON(c, &b); err != nil {
			return req, err
		}
		user = b.UserID
	} else {
		var b buyBody
		if err := decodeJSON(c, &b); err != nil {
			return req, err
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
}

func (s *server) handleReset(k itemKind) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, err := pathID(c)
		if err != nil {
			s.writeError(c, err)
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
		if err := k.svc.Reset(c.Request.Context(), id, *b.Stock); err != nil {
			s.writeError(c, err)
			return
		}
		it, err := k.svc.Get(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.log.Info("reset", "id", id, "stock", *b.Stock, "coupon", k.coupon)
		s.writeJSON(c, http.StatusOK, k.itemJSON(it))
	}
}

type modeBody struct {
	Mode *string `json:"mode"`
}

func (s *server) handleSetMode(products, coupons *inventory.Service) gin.HandlerFunc {
	return func(c *gin.Context) {
		var b modeBody
		if err := decodeJSON(c, &b); err != nil {
			s.writeError(c, err)
			return
		}
		if b.Mode == nil {
			s.writeError(c, fieldError("mode is required"))
			return
		}
		mode := *b.Mode
		if err := checkStage(mode, products); err != nil {
			s.writeError(c, err)
			return
		}
		if coupons != nil && !coupons.HasStage(mode) {
			s.writeError(c, errModeDisabled)
			return
		}
		s.mode.Store(&mode)
		s.log.Info("default mode changed", "mode", mode)
		s.writeJSON(c, http.StatusOK, gin.H{"instance": s.instance, "mode": mode})
	}
}
