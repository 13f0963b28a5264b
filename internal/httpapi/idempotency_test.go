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

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

func idemServer(t *testing.T, retention time.Duration, require bool) (http.Handler, *store.DB) {
	t.Helper()
	return idemServerOn(t, testenv.Redis(t), testenv.Name("idem")+":", retention, require)
}

// idemServerOn is idemServer whose records live in rdb under prefix.
func idemServerOn(t *testing.T, rdb redis.UniversalClient, prefix string, retention time.Duration, require bool) (http.Handler, *store.DB) {
	t.Helper()
	db := testenv.SQLite(t)
	// A slow critical section keeps the first request in flight while the
	// duplicates arrive.
	slow := inventory.SectionOptions{Delay: 50 * time.Millisecond}
	stages := map[string]inventory.Stage{"local-mutex": inventory.NewLocalMutex(db.Products(), "product", slow)}
	return httpapi.NewServer(httpapi.Deps{
		Instance:              "idem-1",
		Products:              inventory.NewService(db.Products(), stages, "idem-1", "O"),
		Stage:                 "local-mutex",
		Idempotency:           idempotency.New(rdb, idempotency.Options{Prefix: prefix, Retention: retention}),
		RequireIdempotencyKey: require,
		// Long enough for any of these tests; a duplicate of a request in
		// flight is told to come back after it (Retry-After: 25).
		RequestTimeout: 25 * time.Second,
	}), db
}

func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	return postBy(h, context.Background(), key, body)
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

// TestIdempotencyRecordExpires: a retry within the retention replays the
// first answer; once the record has expired, the same key runs anew. The
// retention is a minute, so the retry comes before it whatever the
// machine's load, and the test makes the record expire itself, after
// checking that the store gave it the retention as its TTL. (With a
// 300 ms retention, CI beside two hogs and stress suites let the record
// expire before the "immediate" retry.)
func TestIdempotencyRecordExpires(t *testing.T) {
	const retention = time.Minute
	rdb, prefix := testenv.Redis(t), testenv.Name("idem")+":"
	h, _ := idemServerOn(t, rdb, prefix, retention, false)
	body := `{"user_id":"exp-user"}`
	if rec := post(h, "key-exp", body); rec.Code != 201 {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	if rec := post(h, "key-exp", body); rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry within the retention must replay: %d %v", rec.Code, rec.Header())
	}
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("the key's record: %v, %v", keys, err)
	}
	for _, k := range keys {
		if ttl, err := rdb.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > retention {
			t.Fatalf("record %s has TTL %v (%v); want the retention, %v at most", k, ttl, err, retention)
		}
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil { // the retention has passed
		t.Fatal(err)
	}
	rec := post(h, "key-exp", body)
	if rec.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("after expiry the key must run anew, not replay: %d %v", rec.Code, rec.Header())
	}
	// Ran anew: the same user cannot buy twice, so it is refused,
	// freshly, rather than replayed.
	if rec.Code != 409 || problemType(t, rec) != "already-purchased" {
		t.Fatalf("after expiry: %d %s", rec.Code, rec.Body)
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

// TestIdempotencyAnswersCarryTheBuyHeaders: the answers the Idempotency-Key
// check gives itself (in flight, reused with another body) and a replay all
// carry the instance and stage of the buy, are never cached, and those that
// mean "not now" say when to come back.
func TestIdempotencyAnswersCarryTheBuyHeaders(t *testing.T) {
	h, _ := idemServer(t, time.Hour, false)
	// Two requests with one key at once: the slow section keeps the first
	// in flight, so the other is told so. Which one comes first is up to
	// the scheduler; a pair that did not overlap is tried again.
	var inFlight *httptest.ResponseRecorder
	key := ""
	for attempt := 0; attempt < 20 && inFlight == nil; attempt++ {
		key = fmt.Sprint("hdr-", attempt)
		body := fmt.Sprintf(`{"user_id":"hdr-user-%d","quantity":1}`, attempt)
		start := make(chan struct{})
		answers := make(chan *httptest.ResponseRecorder, 2)
		for i := 0; i < 2; i++ {
			go func() { <-start; answers <- post(h, key, body) }()
		}
		close(start)
		a, b := <-answers, <-answers
		switch {
		case a.Code == 409 && b.Code == 201:
			inFlight = a
		case b.Code == 409 && a.Code == 201:
			inFlight = b
		case a.Code != 201 || b.Code != 201:
			t.Fatalf("two requests with one key: %d %s / %d %s", a.Code, a.Body, b.Code, b.Body)
		}
	}
	if inFlight == nil {
		t.Fatal("no two requests overlapped in 20 tries")
	}
	body := fmt.Sprintf(`{"user_id":"hdr-user-%s","quantity":1}`, strings.TrimPrefix(key, "hdr-"))
	reused := post(h, key, strings.Replace(body, `"quantity":1`, `"quantity":2`, 1))
	replay := post(h, key, body)
	for name, c := range map[string]struct {
		rec        *httptest.ResponseRecorder
		status     int
		retryAfter string
	}{
		// The first request has its answer within the request timeout.
		"in flight": {inFlight, 409, "25"},
		"reused":    {reused, 422, ""},
		"replay":    {replay, 201, ""},
	} {
		hd := c.rec.Header()
		if c.rec.Code != c.status {
			t.Errorf("%s: status %d, want %d (%s)", name, c.rec.Code, c.status, c.rec.Body)
		}
		if hd.Get("X-Seckill-Instance") != "idem-1" || hd.Get("X-Seckill-Stage") != "local-mutex" {
			t.Errorf("%s: X-Seckill-Instance %q X-Seckill-Stage %q", name, hd.Get("X-Seckill-Instance"), hd.Get("X-Seckill-Stage"))
		}
		if hd.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", name, hd.Get("Cache-Control"))
		}
		if got := hd.Get("Retry-After"); got != c.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", name, got, c.retryAfter)
		}
	}
}

// TestUnknownAPIRouteIsAProblem: a path under /api/ that matches no route is
// answered as problem+json, also when the dashboard serves the other paths.
func TestUnknownAPIRouteIsAProblem(t *testing.T) {
	db := testenv.SQLite(t)
	srv := httpapi.NewServer(httpapi.Deps{
		Instance: "nr-1",
		Products: inventory.NewService(db.Products(), map[string]inventory.Stage{}, "nr-1", "O"),
		Stage:    "db-atomic",
		Web:      http.NotFoundHandler(),
	})
	for _, m := range []string{"GET", "POST"} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(m, "/api/v1/nope", nil))
		if rec.Code != 404 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/problem+json") || !strings.Contains(rec.Body.String(), "/problems/route-not-found") {
			t.Errorf("%s /api/v1/nope: %d %q %s", m, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
	}
}

// TestUnknownPageIsAProblem: a page the dashboard does not have is a 404
// problem+json too, and a page it has is served as it is.
func TestUnknownPageIsAProblem(t *testing.T) {
	db := testenv.SQLite(t)
	web := http.NewServeMux()
	web.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<h1>dashboard</h1>"))
	})
	srv := httpapi.NewServer(httpapi.Deps{
		Instance: "nr-1",
		Products: inventory.NewService(db.Products(), map[string]inventory.Stage{}, "nr-1", "O"),
		Stage:    "db-atomic",
		Web:      web,
	})
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/no-such-page.html", nil))
	if rec.Code != 404 || rec.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(rec.Body.String(), `"type":"/problems/route-not-found"`) || strings.Contains(rec.Body.String(), "page not found") {
		t.Errorf("GET /no-such-page.html: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || rec.Body.String() != "<h1>dashboard</h1>" {
		t.Errorf("GET /: %d %s", rec.Code, rec.Body)
	}
}
