// Package api is the wire format of seckill's HTTP API: one Go type per
// answer, with its JSON names, declared once. The server (internal/httpapi)
// writes them and every client in this repository decodes them: the
// dashboard's burst, the lab, the chaos suite and the tests. It has no
// dependencies, so a client that imports it does not link the server.
package api

import (
	"encoding/json"
	"time"
)

// The headers seckill reads and writes. A buy's stage is named by
// StageHeader on the way in (admin only) and on the way out; StageHeaderAlias
// is its former name, still read on input and never written.
const (
	StageHeader      = "X-Seckill-Stage"
	StageHeaderAlias = "X-Seckill-Mode"
	InstanceHeader   = "X-Seckill-Instance"
)

// Health is the answer of GET /healthz and GET /readyz.
type Health struct {
	Status   string `json:"status"` // "ok" or "ready"
	Instance string `json:"instance"`
}

// RedisPing is the answer of GET /api/v1/admin/redis-ping: one round trip
// from this instance to the Redis that keeps its Idempotency-Key records,
// the first hop of every keyed buy. Like every duration in this API, it is
// in milliseconds, with a fraction.
type RedisPing struct {
	Instance    string  `json:"instance"`
	RoundTripMS float64 `json:"round_trip_ms"`
}

// RateLimit is the answer of GET and PUT /api/v1/admin/rate-limit: this
// instance's limit of the safe stages' buys and grabs, per buyer and
// fleet-wide (the counts live in Redis). Over it a buyer hears 429
// rate-limited. A change applies to the instance that answers it only.
type RateLimit struct {
	Instance string `json:"instance"`
	// On says whether buys are limited now (interval_ms above 0).
	On bool `json:"on"`
	// IntervalMS is the time between two buys of one buyer at the
	// sustained rate (100: ten a second); 0 when the limit is off.
	IntervalMS float64 `json:"interval_ms"`
	// Burst is how many buys one buyer may send at once.
	Burst int `json:"burst"`
	// By is what counts as one buyer: "account" (the user_id), "address"
	// (the client's IP), or both, each limited on its own.
	By []string `json:"by"`
	// TrustedProxies are the peers whose X-Forwarded-For names the client
	// (SECKILL_TRUSTED_PROXIES, set at start); from any other peer the
	// client is the connection's address.
	TrustedProxies []string `json:"trusted_proxies"`
	// OpeningDrawMS is the opening draw's span (0: none): buyers of an
	// item with an opening who arrive in its first opening_draw_ms are
	// held and let in at random within the next opening_draw_ms, so that
	// arriving first at the opening wins nothing; those who arrive in the
	// next opening_draw_ms wait for the draw's end.
	OpeningDrawMS float64 `json:"opening_draw_ms"`
}

// Info is the answer of GET /api/v1/info.
type Info struct {
	Instance string   `json:"instance"`
	Stage    string   `json:"stage"`  // this instance's default stage
	Stages   []string `json:"stages"` // the stages it can run, in teaching order
	Admin    bool     `json:"admin"`  // admin routes are on
	// Process names the operating-system process that serves this
	// instance, as host/pid: the demo's instances share one, and a
	// client that adds up the instances' CPU (the lab) counts it once.
	Process string `json:"process,omitempty"`
	// PIDNamespace names the pid namespace of Process's pid (on Linux,
	// where /proc/self/ns/pid points, such as "pid:[4026531836]"); empty
	// where there is none to name. Two processes may share one host/pid
	// in different namespaces: containers on the host's network, each
	// running seckill as pid 1.
	PIDNamespace string `json:"pid_namespace,omitempty"`
	// LockFair reports that this instance's redis-lock runs the lock's
	// fair mode (SECKILL_LOCK_FAIR): buyers get the lock in the order
	// they joined its line in Redis, across the fleet. A lab labels its
	// rows by it ("redis-lock (fair)").
	LockFair bool `json:"lock_fair"`
}

// Product is one product: GET /api/v1/products/{id}, and each entry of the
// list, and the answer of its reset.
type Product struct {
	ID           int64  `json:"id"`
	Name         string `json:"name"`
	PriceCents   int64  `json:"price_cents"`
	InitialStock int    `json:"initial_stock"`
	Stock        int    `json:"stock"`
	// OpensAt is when the sale opens (RFC 3339, UTC); null: on sale since
	// the last reset. Buys before it are refused 409 sale-not-open, with
	// Retry-After.
	OpensAt *time.Time `json:"opens_at"`
	// ClosesAt is when the sale closes (RFC 3339, UTC); null: it does not
	// close. Buys from it on are refused 409 sale-closed.
	ClosesAt *time.Time `json:"closes_at"`
	// ServerTime is the reference clock's time when the answer was made
	// (the database's clock; the Redis stages decide by Redis's, which
	// runs beside it): count down by opens_at minus server_time, not by
	// the page's own clock.
	ServerTime time.Time `json:"server_time"`
}

// Products is the answer of GET /api/v1/products: one page of products,
// by id.
type Products struct {
	Products []Product `json:"products"`
	// NextCursor, when set, asks for the next page (?cursor=); left out
	// on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Coupon is one coupon batch. Total and Remaining are the coupon words for
// InitialStock and Stock, which are kept for clients that treat every item
// alike.
type Coupon struct {
	ID           int64  `json:"id"`
	Name         string `json:"name"`
	Total        int    `json:"total"`
	Remaining    int    `json:"remaining"`
	InitialStock int    `json:"initial_stock"`
	Stock        int    `json:"stock"`
	// OpensAt is when the sale opens (RFC 3339, UTC); null: on sale since
	// the last reset. Buys before it are refused 409 sale-not-open, with
	// Retry-After.
	OpensAt *time.Time `json:"opens_at"`
	// ClosesAt is when the sale closes (RFC 3339, UTC); null: it does not
	// close. Buys from it on are refused 409 sale-closed.
	ClosesAt *time.Time `json:"closes_at"`
	// ServerTime is the reference clock's time when the answer was made
	// (the database's clock; the Redis stages decide by Redis's, which
	// runs beside it): count down by opens_at minus server_time, not by
	// the page's own clock.
	ServerTime time.Time `json:"server_time"`
}

// Coupons is the answer of GET /api/v1/coupons: one page of coupon
// batches, by id.
type Coupons struct {
	Coupons []Coupon `json:"coupons"`
	// NextCursor, when set, asks for the next page (?cursor=); left out
	// on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Archived is the answer of an archive: the item is out of the catalogue
// (buyers get 404 not-found), and its orders are kept.
type Archived struct {
	Kind     string `json:"kind"`
	ID       int64  `json:"id"`
	Archived bool   `json:"archived"`
}

// SessionItem is one item of a session and the stock it was given.
type SessionItem struct {
	ID    int64 `json:"id"`
	Stock int   `json:"stock"`
}

// Session is the answer of POST /api/v1/admin/sessions: every item of the
// session, restocked with its orders deleted and on sale in its window.
type Session struct {
	Kind  string        `json:"kind"`
	Items []SessionItem `json:"items"`
	// OpensAt and ClosesAt are the session's window (RFC 3339, UTC); null
	// for no bound on that side.
	OpensAt  *time.Time `json:"opens_at"`
	ClosesAt *time.Time `json:"closes_at"`
}

// Order is the answer of a buy: 201 with the order confirmed (written), or,
// under redis-stream, 202 with the order pending (accepted, written soon)
// and a Location header naming its OrderStatus.
type Order struct {
	OrderNo   string    `json:"order_no"`
	ProductID int64     `json:"product_id"`
	UserID    string    `json:"user_id"`
	Quantity  int       `json:"quantity"`
	Stage     string    `json:"stage"`
	Instance  string    `json:"instance"`
	CreatedAt time.Time `json:"created_at"`
	Status    string    `json:"status"` // "confirmed" (201) or "pending" (202)
}

// Grab is the answer of a coupon grab: 201 confirmed, or 202 pending as
// for Order. Its order number is an order number like any other (it starts
// with C), and its batch is named coupon_id, as everywhere.
type Grab struct {
	OrderNo   string    `json:"order_no"`
	CouponID  int64     `json:"coupon_id"`
	UserID    string    `json:"user_id"`
	Stage     string    `json:"stage"`
	Instance  string    `json:"instance"`
	CreatedAt time.Time `json:"created_at"`
	Status    string    `json:"status"` // "confirmed" (201) or "pending" (202)
}

// The statuses of an order (OrderStatus.Status).
const (
	StatusPending   = "pending"   // accepted by redis-stream, not yet written
	StatusConfirmed = "confirmed" // written: the units left the stock
	StatusPaid      = "paid"      // paid within the payment window
	StatusCancelled = "cancelled" // not paid in time; the units are back in stock
	StatusFailed    = "failed"    // accepted but could not be written; the units went back
)

// OrderStatus is the answer of GET /api/v1/orders/{order_no} and of
// POST /api/v1/orders/{order_no}/pay, for an order of any stage (order
// numbers starting with O) or a coupon grab (C).
type OrderStatus struct {
	OrderNo   string     `json:"order_no"`
	Kind      string     `json:"kind"`                 // "product" or "coupon"
	ProductID int64      `json:"product_id,omitempty"` // set for a product
	CouponID  int64      `json:"coupon_id,omitempty"`  // set for a coupon grab
	UserID    string     `json:"user_id"`
	Quantity  int        `json:"quantity"`
	Stage     string     `json:"stage"`
	Instance  string     `json:"instance,omitempty"` // the instance that accepted it
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`           // accepted
	WrittenAt *time.Time `json:"written_at,omitempty"` // written to the database; absent while pending
	// PayBy is when a confirmed product order's payment window closes;
	// absent for coupons and when orders wait for payment forever.
	PayBy  *time.Time `json:"pay_by,omitempty"`
	Reason string     `json:"reason,omitempty"` // why a failed order failed
}

// Audit is the answer of GET /api/v1/{products,coupons}/{id}/audit: does
// what left the stock match what was sold?
type Audit struct {
	ProductID    int64 `json:"product_id,omitempty"` // set for a product
	CouponID     int64 `json:"coupon_id,omitempty"`  // set for a coupon batch
	InitialStock int   `json:"initial_stock"`
	Stock        int   `json:"stock"`
	Sold         int   `json:"sold"`   // units in live orders: confirmed or paid
	Orders       int   `json:"orders"` // live orders (or grabs)
	Oversold     int   `json:"oversold"`
	Conserved    bool  `json:"conserved"` // initial_stock = stock + sold
	// Paid is the units of paid orders, part of Sold.
	Paid int `json:"paid"`
	// Cancelled is the units of orders cancelled unpaid: back in Stock,
	// not in Sold.
	Cancelled       int `json:"cancelled"`
	CancelledOrders int `json:"cancelled_orders"`
	// Failed counts orders redis-stream accepted and could not write:
	// their units went back, and are in neither Stock's loss nor Sold.
	Failed int `json:"failed"`
	// Pending is the units of orders redis-stream accepted and has not
	// written yet: they left its Redis copy of the stock, not yet the
	// database's Stock, so Conserved holds without them.
	Pending       int `json:"pending"`
	PendingOrders int `json:"pending_orders"`
	// Reconcile is the fleet's last reconcile finding for this item, if
	// the job has run since the item was last reset.
	Reconcile *Reconcile `json:"reconcile,omitempty"`
	// Bursts are the verdicts of the item's last bursts, newest first:
	// kept across resets and cancellations, so an oversell stays on the
	// record after its orders are gone.
	Bursts []BurstVerdict `json:"bursts,omitempty"`
	// GivenBack lists the reservations whose units went back to the
	// item's Redis stock since its last reset (by a buy that failed after
	// it reserved, or the reconcile job), oldest first; at most the
	// newest 1,000 per Redis key. A buyer refused while such units were
	// away was refused with stock in flight, not on the shelf.
	GivenBack []GiveBack `json:"given_back,omitempty"`
}

// GiveBack is one entry of Audit.GivenBack.
type GiveBack struct {
	ReservedAt time.Time `json:"reserved_at"`
	At         time.Time `json:"at"` // when the units went back
	Units      int       `json:"units"`
}

// Reconcile is one item's finding in the fleet's last reconcile run.
type Reconcile struct {
	At       time.Time `json:"at"`
	Instance string    `json:"instance"` // the instance that ran it
	// CheckedAt is when the item was last checked in full: At, or earlier
	// when the run at At found the item's Redis copy exactly as that check
	// left it, with nothing bought, reset or in flight since, and vouched
	// for its finding without checking it again.
	CheckedAt  time.Time `json:"checked_at"`
	Oversold   int       `json:"oversold"`
	Conserved  bool      `json:"conserved"`
	RedisDrift *Drift    `json:"redis_drift,omitempty"`
	// BucketDrift is how redis-sharded's buckets, summed, compared with
	// the database.
	BucketDrift *Drift `json:"bucket_drift,omitempty"`
	Error       string `json:"error,omitempty"`
	// Note says what the run found that it could not repair, e.g. orders
	// lost with a Redis that restarted empty.
	Note string `json:"note,omitempty"`
}

// Drift is how a Redis copy of the stock (redis-atomic's, or the sum of
// redis-sharded's buckets) compared with the database in a reconcile run.
type Drift struct {
	RedisStock int  `json:"redis_stock"` // -1 when Redis had no copy
	DBStock    int  `json:"db_stock"`
	Resolved   int  `json:"resolved"` // stale reservations confirmed or given back
	Busy       bool `json:"busy"`     // buys were in flight; not compared
	Repaired   bool `json:"repaired"` // the Redis copy was corrected
}

// StageChange is the body of PUT /api/v1/admin/stage and of
// PUT /api/v1/admin/fleet/stage, and the former's answer: Instance is
// set in answers only.
type StageChange struct {
	Instance string `json:"instance,omitempty"`
	Stage    string `json:"stage"`
}

// FleetStageChange is the answer of PUT /api/v1/admin/fleet/stage: 200
// when every instance switched, 502 with each one's answer when any did
// not.
type FleetStageChange struct {
	Stage string      `json:"stage"`
	OK    bool        `json:"ok"`
	Peers []PeerStage `json:"peers"`
}

// PeerStage is one instance's answer to a fleet-wide stage switch.
type PeerStage struct {
	URL      string `json:"url"`
	Instance string `json:"instance,omitempty"`
	Stage    string `json:"stage,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Fleet is the answer of GET /api/v1/fleet.
type Fleet struct {
	ServedBy string       `json:"served_by"`
	Peers    []PeerStatus `json:"peers"`
	BurstMax int          `json:"burst_max"`
	Admin    bool         `json:"admin"`
}

// PeerStatus is one instance's health and stage.
type PeerStatus struct {
	URL      string   `json:"url"`
	Instance string   `json:"instance,omitempty"`
	Healthy  bool     `json:"healthy"`         // /healthz answered 200
	Ready    bool     `json:"ready"`           // /readyz answered 200: its backends answer
	Stage    string   `json:"stage,omitempty"` // its default stage
	Stages   []string `json:"stages,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// BurstRequest is the body of POST /api/v1/admin/burst.
type BurstRequest struct {
	// Kind is "product" (buys) or "coupon" (grabs).
	Kind string `json:"kind"`
	// ItemID is the product or coupon batch.
	ItemID int64 `json:"item_id"`
	// N is the number of concurrent requests, 1 to the fleet's burst_max.
	N int `json:"n"`
	// Stage, when set, runs every request under that stage whatever the
	// instances' default.
	Stage string `json:"stage,omitempty"`
}

// BurstResult is the answer of POST /api/v1/admin/burst: what the burst did.
type BurstResult struct {
	Request    BurstRequest   `json:"request"`
	Targets    []string       `json:"targets"`
	Counts     BurstCounts    `json:"counts"`
	ByInstance map[string]int `json:"by_instance"` // answers per X-Seckill-Instance
	Stages     map[string]int `json:"stages"`      // answers per X-Seckill-Stage
	ElapsedMS  float64        `json:"elapsed_ms"`
	Latency    BurstLatency   `json:"latency"`
	// BuyerLatency times the same answers from the burst's start, when
	// every buyer arrived at once, rather than from each request's send:
	// it includes the wait for one of the burst's in-flight slots, which
	// Latency leaves out.
	BuyerLatency BurstLatency `json:"buyer_latency"`
	Audit        *Audit       `json:"audit,omitempty"`
	AuditError   string       `json:"audit_error,omitempty"`
}

// BurstVerdict is what one burst did to its item, as recorded when it
// ended (GET .../audit lists the last ones).
type BurstVerdict struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"` // "product" or "coupon"
	ItemID int64     `json:"item_id"`
	// Stage is the stage the burst ran under: its request's stage, or the
	// one stage every answer named, or "mixed".
	Stage        string `json:"stage"`
	Buyers       int    `json:"buyers"`
	InitialStock int    `json:"initial_stock"`
	// Sold counts the units of live orders when the burst ended, orders
	// still queued (redis-stream) included.
	Sold      int     `json:"sold"`
	Oversold  int     `json:"oversold"`
	ElapsedMS float64 `json:"elapsed_ms"`
	// P99MS is the p99 of the answers' response time, from each request's
	// send.
	P99MS float64 `json:"p99_ms"`
	// BuyerP99MS is the p99 of the answers' buyer time, from the burst's
	// start, when every buyer arrived: it holds the wait for a free
	// worker. 0 in a verdict recorded before it was kept.
	BuyerP99MS float64 `json:"buyer_p99_ms"`
}

// BurstCounts are a burst's answers, by class.
type BurstCounts struct {
	Created      int `json:"created"`       // 201: an order or grab was written
	Accepted     int `json:"accepted"`      // 202: an order was accepted, to be written (redis-stream)
	SoldOut      int `json:"sold_out"`      // 409 sold-out
	LockTimeout  int `json:"lock_timeout"`  // 429 lock-timeout
	Overloaded   int `json:"overloaded"`    // 503 with Retry-After: turned away, try later
	Other4xx     int `json:"other_4xx"`     // any other 4xx
	ServerErrors int `json:"server_errors"` // any other 5xx
	Failed       int `json:"failed"`        // no answer: connection error or timeout
}

// BurstLatency summarises a burst's response times in milliseconds.
// Samples holds every one, sorted, for the dashboard's chart.
type BurstLatency struct {
	P50     float64   `json:"p50_ms"`
	P95     float64   `json:"p95_ms"`
	P99     float64   `json:"p99_ms"`
	Max     float64   `json:"max_ms"`
	Samples []float64 `json:"samples_ms"`
}

// DemoInstances is the answer of GET /demo/instances on the front page of
// `seckill demo`: the base URLs of the instances it spreads the API over.
type DemoInstances struct {
	Instances []string `json:"instances"`
}

// LabLatest is the answer of GET /api/v1/lab/latest.
type LabLatest struct {
	Available bool            `json:"available"`
	Hint      string          `json:"hint,omitempty"`    // how to make a report, when none is available
	Run       string          `json:"run,omitempty"`     // the run's folder name
	Results   json.RawMessage `json:"results,omitempty"` // the run's results.json, as written by the lab
	Files     []string        `json:"files,omitempty"`   // the run's files, served under /api/v1/lab/runs/{run}/
}

// ProblemTypePrefix starts every Problem's Type; GET /problems/<slug>
// documents each type.
const ProblemTypePrefix = "/problems/"

// Problem is every error answer: RFC 9457 problem details, served as
// application/problem+json. Type is stable ("/problems/sold-out"); clients
// switch on it, never on Title or Detail.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
}
