package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"sort"
	"sync"
	"time"
)

// tally counts the answers of one burst by kind.
type tally struct {
	Created     int `json:"created"`     // 201: order written
	Accepted    int `json:"accepted"`    // 202: pending (redis-stream), written soon
	Refused     int `json:"refused"`     // 4xx: sold out and the like
	Unavailable int `json:"unavailable"` // 503: allowed, counted
	Other5xx    int `json:"other_5xx"`   // any other 5xx: a failure
	Unanswered  int `json:"unanswered"`  // no answer at all (status 0): a failure
	Unexpected  int `json:"unexpected"`  // 1xx, 2xx other than 201/202, 3xx: a failure
}

// tallyOf counts statuses; 0 stands for a request that got no answer.
func tallyOf(statuses []int) tally {
	var t tally
	for _, s := range statuses {
		switch {
		case s == http.StatusCreated:
			t.Created++
		case s == http.StatusAccepted:
			t.Accepted++
		case s == http.StatusServiceUnavailable:
			t.Unavailable++
		case s >= 500:
			t.Other5xx++
		case s >= 400:
			t.Refused++
		case s == 0:
			t.Unanswered++
		default:
			t.Unexpected++
		}
	}
	return t
}

// burstResult is one product's burst: what the buyers heard and what the
// database holds after.
type burstResult struct {
	Product  int64 `json:"product"`
	Stock    int   `json:"stock"`
	Buyers   int   `json:"buyers"`
	Answers  tally `json:"answers"`
	Orders   int   `json:"orders"` // units in confirmed and paid orders of the product
	Oversold int   `json:"oversold"`
	Exact    bool  `json:"exact"`
}

// judge says whether a burst sold exactly: every unit sold to a buyer who
// heard so (201, or 202 then written), as many units in the orders, none
// oversold, and no failure answer (a 5xx other than 503, no answer).
func judge(product int64, stock, buyers int, t tally, orders int) burstResult {
	r := burstResult{Product: product, Stock: stock, Buyers: buyers, Answers: t, Orders: orders}
	if orders > stock {
		r.Oversold = orders - stock
	}
	r.Exact = t.Created+t.Accepted == stock && orders == stock &&
		t.Other5xx == 0 && t.Unanswered == 0 && t.Unexpected == 0
	return r
}

// pickProducts draws k distinct ids from 1..n (k is capped at n).
func pickProducts(rng *rand.Rand, n, k int) []int64 {
	if k > n {
		k = n
	}
	seen := make(map[int64]bool, k)
	out := make([]int64, 0, k)
	for len(out) < k {
		id := int64(rng.Intn(n)) + 1
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// orderCounter answers how many units of a product the orders hold.
type orderCounter func(ctx context.Context, product int64) (int, error)

// sqlOrders counts from the database itself, not through the service.
func sqlOrders(db *sql.DB) orderCounter {
	return func(ctx context.Context, product int64) (int, error) {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE product_id = ? AND status IN ('confirmed', 'paid')", product).Scan(&n)
		return n, err
	}
}

// burster runs the bursts against a fleet.
type burster struct {
	urls     []string // the instances; buyers are spread round-robin
	token    string
	stock    int
	buyers   int
	inFlight int
	settle   time.Duration // how long orders may take to be written (202s)
	client   *http.Client
	orders   orderCounter
}

// run opens every product in one session, then bursts them one by one.
func (b burster) run(ctx context.Context, ids []int64, tag string) ([]burstResult, error) {
	if err := b.session(ctx, ids); err != nil {
		return nil, err
	}
	var out []burstResult
	for _, id := range ids {
		r, err := b.burst(ctx, id, tag)
		if err != nil {
			return out, fmt.Errorf("burst on product %d: %w", id, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// session restocks every product to b.stock, always on sale, with one
// admin request (POST /api/v1/admin/sessions).
func (b burster) session(ctx context.Context, ids []int64) error {
	type item struct {
		ID    int64 `json:"id"`
		Stock int   `json:"stock"`
	}
	body := struct {
		Kind  string `json:"kind"`
		Items []item `json:"items"`
	}{Kind: "product"}
	for _, id := range ids {
		body.Items = append(body.Items, item{id, b.stock})
	}
	js, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.urls[0]+"/api/v1/admin/sessions", bytes.NewReader(js))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.token)
	res, err := b.client.Do(req)
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 2048))
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated {
		return fmt.Errorf("session: %s: %s", res.Status, msg)
	}
	return nil
}

// burst sends b.buyers distinct buyers at one product, b.inFlight at a
// time, and judges the outcome against the database.
func (b burster) burst(ctx context.Context, id int64, tag string) (burstResult, error) {
	statuses := make([]int, b.buyers)
	sem := make(chan struct{}, b.inFlight)
	var wg sync.WaitGroup
	for i := range statuses {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			statuses[i] = b.buy(ctx, b.urls[i%len(b.urls)], id, fmt.Sprintf("%s-p%d-b%d", tag, id, i))
		}(i)
	}
	wg.Wait()
	t := tallyOf(statuses)
	// 202s are written after the answer: wait until the orders hold them.
	deadline := time.Now().Add(b.settle)
	for {
		n, err := b.orders(ctx, id)
		if err != nil {
			return burstResult{}, err
		}
		if n >= t.Created+t.Accepted || time.Now().After(deadline) {
			return judge(id, b.stock, b.buyers, t, n), nil
		}
		select {
		case <-ctx.Done():
			return burstResult{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// buy is one buyer's request; 0 when no answer came.
func (b burster) buy(ctx context.Context, url string, id int64, user string) int {
	js := fmt.Sprintf(`{"user_id":%q}`, user)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/api/v1/products/%d/buy", url, id), bytes.NewReader([]byte(js)))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := b.client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}
