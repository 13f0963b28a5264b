package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// onFirstCommand runs do once, before the first command a client sends.
type onFirstCommand struct {
	once sync.Once
	do   func()
}

func (h *onFirstCommand) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *onFirstCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.once.Do(h.do)
		return next(ctx, cmd)
	}
}

func (h *onFirstCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.once.Do(h.do)
		return next(ctx, cmds)
	}
}

// TestKeyedBuyRunsUnderTheStageItWasReadWith: a buy's stage is chosen once,
// when the buy is read. The instance's default stage changes while the
// buy's Idempotency-Key is being claimed; the buy still runs under the
// stage its answer is stamped with (it used to be chosen again by the
// handler, after the claim, and ran under the new default while the
// X-Seckill-Stage header named the old one).
func TestKeyedBuyRunsUnderTheStageItWasReadWith(t *testing.T) {
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	if err := db.Products().Reset(context.Background(), 1, 10); err != nil {
		t.Fatal(err)
	}
	stages := map[string]inventory.Stage{
		"local-mutex": inventory.NewLocalMutex(db.Products(), "product", inventory.SectionOptions{}),
		"db-atomic":   inventory.NewDBAtomic(db.Products()),
	}
	h := httpapi.NewServer(httpapi.Deps{
		Instance:       "read-1",
		Products:       inventory.NewService(db.Products(), stages, "read-1", "O"),
		Stage:          "local-mutex",
		AdminToken:     "read-once-token",
		Idempotency:    idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("readonce") + ":"}),
		RequestTimeout: 10 * time.Second,
	})
	switched := make(chan int, 1)
	rdb.AddHook(&onFirstCommand{do: func() {
		req := httptest.NewRequest("PUT", "/api/v1/admin/stage", strings.NewReader(`{"stage":"db-atomic"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer read-once-token")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switched <- rec.Code
	}})

	rec := post(h, "read-once-key", `{"user_id":"reader","quantity":1}`)
	if code := <-switched; code != http.StatusOK {
		t.Fatalf("switching the default stage during the claim: %d", code)
	}
	var o api.Order
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &o) != nil {
		t.Fatalf("the buy: %d %s", rec.Code, rec.Body)
	}
	if header := rec.Header().Get("X-Seckill-Stage"); header != "local-mutex" || o.Stage != "local-mutex" {
		t.Fatalf("stamped %q, ran under %q; want both local-mutex, the default when the buy was read", header, o.Stage)
	}
	if after := post(h, "", `{"user_id":"later","quantity":1}`); after.Header().Get("X-Seckill-Stage") != "db-atomic" {
		t.Fatalf("a later buy: stage %q, want the new default db-atomic", after.Header().Get("X-Seckill-Stage"))
	}
}
