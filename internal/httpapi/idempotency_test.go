package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

func idemServer(t *testing.T, retention time.Duration, require bool) (http.Handler, *store.DB) {
	t.Helper()
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	// A slow critical section keeps the first request in flight while the
	// duplicates arrive.
	slow := inventory.SectionOptions{Delay: 50 * time.Millisecond}
	stages := map[string]inventory.Stage{"local-mutex": inventory.NewLocalMutex(db.Products(), "product", slow)}
	return httpapi.NewServer(httpapi.Deps{
		Instance:              "idem-1",
		Products:              inventory.NewService(db.Products(), stages, "idem-1", "O"),
		Mode:                  "local-mutex",
		Idempotency:           idempotency.New(rdb, idempotency.Options{Prefix: testenv.Name("idem") + ":", Retention: retention}),
		RequireIdempotencyKey: require,
	}), db
}

func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/api/v1/products/1/buy", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestIdempotencyConcurrentDuplicates(t *testing.T) {
	h, db := idemServer(t, time.Hour, false)
	const n = 100
	body := `{"user_id":"dup-user","quantity":1}`
	start := make(chan struct{})
	recs := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			recs[i] = post(h, "key-one", body)
		}(i)
	}
	close(start)
	wg.Wait()

	var first []byte
	created, replays, inFlight := 0, 0, 0
	for _, rec := range recs {
		switch {
		case rec.Code == 201 && rec.Header().Get("Idempotent-Replayed") == "":
			created++
			first = rec.Body.Bytes()
		case rec.Code == 201:
			replays++
		case rec.Code == 409 && strings.Contains(rec.Body.String(), "/problems/idempotency-in-flight"):
			inFlight++
		default:
			t.Fatalf("unexpected answer %d: %s", rec.Code, rec.Body)
		}
	}
	if created != 1 || created+replays+inFlight != n || inFlight == 0 {
		t.Fatalf("created=%d replays=%d in-flight=%d; want exactly one creation and some in-flight refusals", created, replays, inFlight)
	}
	for _, rec := range recs {
		if rec.Header().Get("Idempotent-Replayed") == "true" && !bytes.Equal(rec.Body.Bytes(), first) {
			t.Fatalf("replay differs from the original:\n%s\n%s", rec.Body, first)
		}
	}
	// After the first finished, every retry is a byte-identical replay.
	again := post(h, "key-one", body)
	if again.Code != 201 || again.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body.Bytes(), first) {
		t.Fatalf("retry after completion: %d %q %s", again.Code, again.Header().Get("Idempotent-Replayed"), again.Body)
	}
	if again.Header().Get("X-Seckill-Instance") != "idem-1" || again.Header().Get("Content-Type") == "" {
		t.Fatalf("replay lost headers: %v", again.Header())
	}
	a, err := db.Products().Audit(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != 1 {
		t.Fatalf("want exactly 1 order, got %d", a.Orders)
	}

	mismatch := post(h, "key-one", `{"user_id":"dup-user","quantity":2}`)
	if mismatch.Code != 422 || problemType(t, mismatch) != "idempotency-mismatch" {
		t.Fatalf("same key, other body: %d %s", mismatch.Code, mismatch.Body)
	}
}

func TestIdempotencyRecordExpires(t *testing.T) {
	h, _ := idemServer(t, 300*time.Millisecond, false)
	body := `{"user_id":"exp-user"}`
	if rec := post(h, "key-exp", body); rec.Code != 201 {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	if rec := post(h, "key-exp", body); rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("immediate retry must replay: %d %v", rec.Code, rec.Header())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec := post(h, "key-exp", body)
		if rec.Header().Get("Idempotent-Replayed") == "" {
			// Ran anew: the same user cannot buy twice, so it is refused,
			// freshly, rather than replayed.
			if rec.Code != 409 || problemType(t, rec) != "already-purchased" {
				t.Fatalf("after expiry: %d %s", rec.Code, rec.Body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the record never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestIdempotencyKeyValidationAndRequirement(t *testing.T) {
	h, db := idemServer(t, time.Hour, true)
	cases := []struct {
		key, problem string
		status       int
	}{
		{"", "idempotency-key-required", 400},
		{"has space", "idempotency-key-invalid", 400},
		{strings.Repeat("k", 256), "idempotency-key-invalid", 400},
		{"caf\u00e9", "idempotency-key-invalid", 400},
	}
	for i, c := range cases {
		rec := post(h, c.key, fmt.Sprintf(`{"user_id":"v%d"}`, i))
		if rec.Code != c.status || problemType(t, rec) != c.problem {
			t.Errorf("key %q: %d %s", c.key, rec.Code, rec.Body)
		}
	}
	a, err := db.Products().Audit(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != 0 {
		t.Fatalf("refused requests created %d orders", a.Orders)
	}
}
