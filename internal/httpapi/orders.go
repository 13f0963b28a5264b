package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// The order routes: what became of an order of any stage, and its
// payment. Order numbers say their kind: O for products, C for coupon
// grabs (inventory.Service's prefixes).
//
//	GET  /api/v1/orders/{order_no}       pending, confirmed, paid, cancelled or failed
//	POST /api/v1/orders/{order_no}/pay   idempotent; 409 order-cancelled when too late
func addOrderRoutes(api *gin.RouterGroup, s *server, d Deps, idem gin.HandlerFunc) {
	api.GET("/orders/:order_no", s.markInstance, s.handleOrder(d))
	api.POST("/orders/:order_no/pay", s.markInstance, idem, s.handlePay(d))
}

// markInstance names this instance on every answer of the route, those
// the Idempotency-Key check gives before the handler runs included.
func (s *server) markInstance(c *gin.Context) {
	c.Header(api.InstanceHeader, s.instance)
}

// orderPath is where a buy's order can be looked up.
func orderPath(no string) string { return "/api/v1/orders/" + no }

// maxOrderNo bounds an order number, as the schema does.
const maxOrderNo = 40

// orderService picks the service of an order number's kind.
func orderService(c *gin.Context, d Deps) (no string, svc *inventory.Service, coupon bool, err error) {
	no = c.Param("order_no")
	if no == "" || len(no) > maxOrderNo || strings.IndexFunc(no, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '_')
	}) >= 0 {
		return no, nil, false, errOrderNo
	}
	switch {
	case no[0] == 'O':
		return no, d.Products, false, nil
	case no[0] == 'C' && d.Coupons != nil:
		return no, d.Coupons, true, nil
	}
	return no, nil, false, inventory.ErrOrderNotFound
}

func (s *server) handleOrder(d Deps) gin.HandlerFunc {
	return func(c *gin.Context) {
		no, svc, coupon, err := orderService(c, d)
		if err != nil {
			s.writeError(c, err)
			return
		}
		o, err := svc.Order(c.Request.Context(), no)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.writeJSON(c, http.StatusOK, orderStatus(svc, o, coupon))
	}
}

// payBody is the optional body of a payment: a buyer who names itself
// can only pay its own order.
type payBody struct {
	UserID *string `json:"user_id"`
}

func (s *server) handlePay(d Deps) gin.HandlerFunc {
	return func(c *gin.Context) {
		no, svc, coupon, err := orderService(c, d)
		if err != nil {
			s.writeError(c, err)
			return
		}
		var b payBody
		body, err := readBody(c)
		if err == nil && len(body) > 0 {
			// The body is optional: an empty one, even sent chunked with
			// no Content-Length, is none.
			if err = checkMediaType(c); err == nil {
				err = decodeBody(body, &b)
			}
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		if b.UserID != nil {
			// Someone else's order is answered as no order at all.
			o, err := svc.Order(c.Request.Context(), no)
			if err == nil && o.UserID != *b.UserID {
				err = inventory.ErrOrderNotFound
			}
			if err != nil {
				s.writeError(c, err)
				return
			}
		}
		o, err := svc.Pay(c.Request.Context(), no)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.log.Debug("paid", "order", no)
		s.writeJSON(c, http.StatusOK, orderStatus(svc, o, coupon))
	}
}

// orderStatus is an order as the API shows it.
func orderStatus(svc *inventory.Service, o inventory.Order, coupon bool) api.OrderStatus {
	out := api.OrderStatus{OrderNo: o.No, UserID: o.UserID, Quantity: o.Quantity, Stage: o.Stage, Instance: o.Instance,
		Status: o.Status, CreatedAt: o.CreatedAt, Reason: o.Reason}
	if coupon {
		out.Kind, out.CouponID = "coupon", o.ItemID
	} else {
		out.Kind, out.ProductID = "product", o.ItemID
	}
	if !o.WrittenAt.IsZero() && o.Status != inventory.StatusPending {
		out.WrittenAt = timePtr(o.WrittenAt)
	}
	if by := svc.PayBy(o); !coupon && o.Status == inventory.StatusConfirmed && !by.IsZero() {
		out.PayBy = timePtr(by)
	}
	return out
}

func timePtr(t time.Time) *time.Time { return &t }
