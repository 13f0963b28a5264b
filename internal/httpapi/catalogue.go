package httpapi

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// The catalogue through the API: the lists a page at a time, and the
// admin's writes (create or replace by id, archive, schedule a session).

// Bounds of a page of a list.
const (
	defaultPageLimit = 50
	maxPageLimit     = 200
)

// cursorPrefix starts every cursor before it is encoded: a cursor is
// opaque to clients, and a change of its form can be told by the prefix.
const cursorPrefix = "after:"

// encodeCursor is the cursor of the page after the item id.
func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.FormatInt(id, 10)))
}

// decodeCursor reads a cursor as a list answered it: the id the next
// page starts after.
func decodeCursor(cursor string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err == nil {
		if rest, ok := strings.CutPrefix(string(raw), cursorPrefix); ok {
			if id, err := strconv.ParseInt(rest, 10, 64); err == nil && id >= 0 {
				return id, nil
			}
		}
	}
	return 0, fieldError("cursor %q is not a cursor a list answered; leave it out for the first page", cursor)
}

// pageQuery reads a list's query: limit, cursor and state.
func pageQuery(c *gin.Context) (inventory.PageQuery, error) {
	q := inventory.PageQuery{Limit: defaultPageLimit}
	query, err := strictQuery(c.Request.URL.RawQuery)
	if err != nil {
		return q, err
	}
	if raw, ok := query["limit"]; ok {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxPageLimit {
			return q, fieldError("limit %q must be an integer from 1 to %d", raw, maxPageLimit)
		}
		q.Limit = n
	}
	if raw, ok := query["cursor"]; ok {
		after, err := decodeCursor(raw)
		if err != nil {
			return q, err
		}
		q.After = after
	}
	if raw, ok := query["state"]; ok {
		q.State = raw
		valid := false
		for _, s := range inventory.SaleStates {
			valid = valid || s == raw
		}
		if !valid {
			return q, fieldError("state %q must be one of %s", raw, strings.Join(inventory.SaleStates, ", "))
		}
	}
	return q, nil
}

// strictQuery reads a query as url.ParseQuery does, the first value of
// each name, but refuses a pair that is not URL-encoded (a bad %-escape,
// a ';' separator) naming it, where url.ParseQuery drops the pair: a
// dropped cursor or state answered the first page of every state, which
// a client cannot tell from the page it asked for.
func strictQuery(raw string) (map[string]string, error) {
	values := make(map[string]string)
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		rawName, rawValue, _ := strings.Cut(pair, "=")
		name, nerr := url.QueryUnescape(rawName)
		value, verr := url.QueryUnescape(rawValue)
		if nerr != nil || verr != nil || strings.Contains(pair, ";") {
			if nerr != nil {
				name = rawName
			}
			return nil, fieldError("%s: the query pair %q is not URL-encoded name=value (pairs are joined by &)", name, pair)
		}
		if _, seen := values[name]; !seen {
			values[name] = value
		}
	}
	return values, nil
}

// handleList answers one page of the items, by id, with the cursor of
// the next page when there is one.
func (s *server) handleList(ep itemEndpoints) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		q, err := pageQuery(c)
		if err != nil {
			s.writeError(c, err)
			return
		}
		limit := q.Limit
		q.Limit++ // one more tells whether a next page exists
		items, now, err := ep.items(ctx, func() ([]inventory.Item, error) { return ep.svc.Page(ctx, q) })
		if err != nil {
			s.writeError(c, err)
			return
		}
		next := ""
		if len(items) > limit {
			items = items[:limit]
			next = encodeCursor(items[limit-1].ID)
		}
		if ep.coupon {
			out := api.Coupons{Coupons: make([]api.Coupon, 0, len(items)), NextCursor: next}
			for _, it := range items {
				out.Coupons = append(out.Coupons, ep.item(it, now).(api.Coupon))
			}
			s.writeJSON(c, http.StatusOK, out)
			return
		}
		out := api.Products{Products: make([]api.Product, 0, len(items)), NextCursor: next}
		for _, it := range items {
			out.Products = append(out.Products, ep.item(it, now).(api.Product))
		}
		s.writeJSON(c, http.StatusOK, out)
	}
}

// productBody is a product as PUT creates or replaces it.
type productBody struct {
	Name       *string `json:"name"`
	PriceCents *int64  `json:"price_cents"`
	Stock      *int    `json:"stock"`
}

// couponBody is a coupon batch as PUT creates or replaces it.
type couponBody struct {
	Name  *string `json:"name"`
	Total *int    `json:"total"`
}

// readListing reads the body of a PUT of the item id.
func readListing(c *gin.Context, ep itemEndpoints, id int64) (inventory.Listing, error) {
	l := inventory.Listing{ID: id}
	if ep.coupon {
		var b couponBody
		if err := decodeJSON(c, &b); err != nil {
			return l, err
		}
		switch {
		case b.Name == nil:
			return l, fieldError("name is required")
		case b.Total == nil:
			return l, fieldError("total is required")
		case *b.Total < 0 || *b.Total > inventory.MaxStock:
			return l, fieldError("total must be between 0 and %d", inventory.MaxStock)
		}
		l.Name, l.Stock = *b.Name, *b.Total
		return l, l.Validate()
	}
	var b productBody
	if err := decodeJSON(c, &b); err != nil {
		return l, err
	}
	switch {
	case b.Name == nil:
		return l, fieldError("name is required")
	case b.PriceCents == nil:
		return l, fieldError("price_cents is required")
	case b.Stock == nil:
		return l, fieldError("stock is required")
	}
	l.Name, l.PriceCents, l.Stock = *b.Name, *b.PriceCents, *b.Stock
	return l, l.Validate()
}

// handlePut creates (201) or replaces (200) an item by id: the same body
// twice leaves the same item. A replaced item keeps its orders and window
// (see inventory.Service.Put). Refused while a burst of it is in flight.
func (s *server) handlePut(ep itemEndpoints, marks BurstMarks) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.itemID(c)
		if !ok {
			return
		}
		l, err := readListing(c, ep, id)
		if err == nil {
			err = checkNoBurst(c.Request.Context(), marks, ep.kind(), id)
		}
		var created bool
		if err == nil {
			created, err = ep.svc.Put(c.Request.Context(), l)
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		it, now, err := ep.one(c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.log.Info("put", "kind", ep.kind(), "id", id, "created", created, "stock", l.Stock)
		status := http.StatusOK
		if created {
			status = http.StatusCreated
			c.Header("Location", "/api/v1/"+ep.kind()+"s/"+strconv.FormatInt(id, 10))
		}
		s.writeJSON(c, status, ep.item(it, now))
	}
}

// handleArchive archives an item: buyers get 404 from then on, its orders
// are kept. Archiving it again answers the same.
func (s *server) handleArchive(ep itemEndpoints, marks BurstMarks) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.itemID(c)
		if !ok {
			return
		}
		err := checkNoBurst(c.Request.Context(), marks, ep.kind(), id)
		if err == nil {
			err = ep.svc.Archive(c.Request.Context(), id)
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.log.Info("archived", "kind", ep.kind(), "id", id)
		s.writeJSON(c, http.StatusOK, api.Archived{Kind: ep.kind(), ID: id, Archived: true})
	}
}

// sessionBody is a session as read.
type sessionBody struct {
	Kind  string            `json:"kind"`
	Items []sessionItemBody `json:"items"`
	// OpensAt and ClosesAt are the window of every item (RFC 3339); left
	// out or null, no bound on that side.
	OpensAt  *time.Time `json:"opens_at"`
	ClosesAt *time.Time `json:"closes_at"`
}

type sessionItemBody struct {
	ID    *int64 `json:"id"`
	Stock *int   `json:"stock"`
}

// readSession reads a session's body into its items and window.
func readSession(c *gin.Context) (kind string, items []inventory.SessionItem, w inventory.SaleWindow, err error) {
	var b sessionBody
	if err := decodeJSONUpTo(c, &b, MaxSessionBody); err != nil {
		return "", nil, w, err
	}
	kind = b.Kind
	if kind == "" {
		kind = "product"
	}
	if kind != "product" && kind != "coupon" {
		return "", nil, w, fieldError("kind %q must be product or coupon", b.Kind)
	}
	if len(b.Items) == 0 || len(b.Items) > inventory.MaxSessionItems {
		return "", nil, w, fieldError("items must hold 1 to %d items (it has %d)", inventory.MaxSessionItems, len(b.Items))
	}
	items = make([]inventory.SessionItem, len(b.Items))
	for i, it := range b.Items {
		switch {
		case it.ID == nil:
			return "", nil, w, fieldError("items[%d].id is required", i)
		case it.Stock == nil:
			return "", nil, w, fieldError("items[%d].stock is required", i)
		}
		items[i] = inventory.SessionItem{ID: *it.ID, Stock: *it.Stock}
	}
	if b.OpensAt != nil {
		w.OpensAt = b.OpensAt.UTC()
	}
	if b.ClosesAt != nil {
		w.ClosesAt = b.ClosesAt.UTC()
	}
	return kind, items, w, inventory.ValidateSession(items, w)
}

// handleSession schedules a session: many items of one kind restocked,
// their orders deleted, on sale in one window, all or none. It answers
// once every instance sells them. Refused while a burst of any of them is
// in flight.
func (s *server) handleSession(products, coupons itemEndpoints, marks BurstMarks) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		kind, items, w, err := readSession(c)
		ep := products
		if kind == "coupon" {
			ep = coupons
			if coupons.svc == nil {
				err = fieldError("kind coupon: this instance sells no coupons")
			}
		}
		if err == nil {
			ids := make([]int64, len(items))
			for i, it := range items {
				ids[i] = it.ID
			}
			err = checkNoBurst(ctx, marks, ep.kind(), ids...)
		}
		if err == nil {
			err = ep.svc.ScheduleSession(ctx, items, w)
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		out := api.Session{Kind: kind, Items: make([]api.SessionItem, len(items)), OpensAt: timeOrNil(w.OpensAt), ClosesAt: timeOrNil(w.ClosesAt)}
		for i, it := range items {
			out.Items[i] = api.SessionItem{ID: it.ID, Stock: it.Stock}
		}
		s.log.Info("session scheduled", "kind", kind, "items", len(items), "opens_at", w.OpensAt, "closes_at", w.ClosesAt)
		s.writeJSON(c, http.StatusOK, out)
	}
}
