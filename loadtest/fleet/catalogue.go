package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/seckill-lab/seckill/internal/api"
)

// The many scenario sells a catalogue of its own: it creates the products
// it lacks through the admin API (PUT /api/v1/admin/products/{id}), then
// opens all of them at once with a session (POST /api/v1/admin/sessions),
// the bulk form of the reset.

// EnsureProducts creates, through the first target, each product of ids
// that does not exist yet, with stock units, and returns those that
// existed. A created product is on sale at once with its stock and no
// orders; one that existed is left as it is for the caller to restock (a
// replace would wait out the sold-out memory's lease once per product). An
// archived id is refused (409 archived), and so is the set-up.
func (f *Fleet) EnsureProducts(ctx context.Context, ids []int64, stock int) (existed []int64, err error) {
	for _, id := range ids {
		ok, err := f.exists(ctx, fmt.Sprintf("%s/api/v1/products/%d", f.Targets[0], id))
		if err != nil {
			return nil, fmt.Errorf("looking up product %d: %w", id, err)
		}
		if ok {
			existed = append(existed, id)
			continue
		}
		body, err := json.Marshal(map[string]any{"name": fmt.Sprintf("lab many #%d", id), "price_cents": 100, "stock": stock})
		if err != nil {
			return nil, err
		}
		if err := f.Do(ctx, http.MethodPut, fmt.Sprintf("%s/api/v1/admin/products/%d", f.Targets[0], id), body, nil); err != nil {
			return nil, fmt.Errorf("creating product %d: %w", id, err)
		}
	}
	return existed, nil
}

// exists says whether url answers 200 (true) or 404 (false); any other
// answer is an error.
func (f *Fleet) exists(ctx context.Context, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return false, err
	}
	_, rerr := io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); rerr == nil {
		rerr = cerr
	}
	switch {
	case rerr != nil:
		return false, rerr
	case resp.StatusCode == http.StatusOK:
		return true, nil
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("GET %s answered %s", url, resp.Status)
}

// Session restocks every product of items (its orders deleted, its stock
// set, on sale at once and for good) with sessions of at most chunk items
// each, one after another, through the first target: a session answers
// once every instance of the fleet sells its items (docs/api.md), so,
// unlike a reset, one target is asked. A session refused 503 (its
// request deadline passed while it restocked) is sent again, up to
// attempts times in all: it is one transaction, and sending it again
// restocks the same items again.
func (f *Fleet) Session(ctx context.Context, items []api.SessionItem, chunk, attempts int) error {
	for part := range slices.Chunk(items, max(1, chunk)) {
		body, err := json.Marshal(map[string]any{"kind": "product", "items": part})
		if err != nil {
			return err
		}
		for try := 1; ; try++ {
			err = f.Do(ctx, http.MethodPost, f.Targets[0]+"/api/v1/admin/sessions", body, nil)
			if err == nil || try >= attempts || ctx.Err() != nil || !strings.Contains(err.Error(), "503 Service Unavailable") {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("session of products %d to %d on %s: %w", part[0].ID, part[len(part)-1].ID, f.Targets[0], err)
		}
	}
	return nil
}
