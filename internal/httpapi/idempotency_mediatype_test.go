package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMediaTypeRefusalIsNotStoredUnderTheKey: a keyed buy or payment
// refused 415 for its Content-Type ran nothing, and the header is not in
// the key's fingerprint (method, path and body). Stored, the 415 was
// replayed to the retry that fixed the header, for a day; and a buy's 415
// was stored under no user at all (its body was not decoded), so two
// buyers who shared a key heard 422 idempotency-mismatch. The refusal is
// answered before the key is looked at.
func TestMediaTypeRefusalIsNotStoredUnderTheKey(t *testing.T) {
	h := keyedLocalServer(t, "idem-media", "")
	send := func(path, contentType, key, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	expect := func(name string, rec *httptest.ResponseRecorder, status int, problem string) {
		t.Helper()
		expectRun(t, name, rec, status, problem)
	}

	const buy = "/api/v1/products/1/buy"
	expect("buy as text/plain", send(buy, "text/plain", "media-buy-key", `{"user_id":"media-a"}`), http.StatusUnsupportedMediaType, "unsupported-media-type")
	// Another buyer's key never collides, whatever its Content-Type.
	expect("another buyer's buy as text/plain, same key", send(buy, "text/plain", "media-buy-key", `{"user_id":"media-b"}`), http.StatusUnsupportedMediaType, "unsupported-media-type")
	rec := send(buy, "application/json", "media-pay-key", `{"user_id":"media-c"}`)
	expect("buy", rec, http.StatusCreated, "")
	var o struct {
		OrderNo string `json:"order_no"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil || o.OrderNo == "" {
		t.Fatalf("buy answered %s: %v", rec.Body, err)
	}

	pay := "/api/v1/orders/" + o.OrderNo + "/pay"
	expect("pay as text/plain", send(pay, "text/plain", "media-pay-key", `{"user_id":"media-c"}`), http.StatusUnsupportedMediaType, "unsupported-media-type")
	expect("pay, fixed", send(pay, "application/json", "media-pay-key", `{"user_id":"media-c"}`), http.StatusOK, "")
	if rec := send(pay, "application/json", "media-pay-key", `{"user_id":"media-c"}`); rec.Code != http.StatusOK || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry of the payment: %d replayed %q %s, want its 200 replayed", rec.Code, rec.Header().Get("Idempotent-Replayed"), rec.Body)
	}
}

// TestPaymentTakesAnEmptyChunkedBodyAsNoBody: a payment's body is
// optional, and a client that streams its requests sends an empty one
// chunked, with no Content-Length (and often no Content-Type). It was
// refused 415, or 400 malformed-json with a Content-Type; it pays.
func TestPaymentTakesAnEmptyChunkedBodyAsNoBody(t *testing.T) {
	h := keyedLocalServer(t, "pay-chunked", "")
	for i, step := range []struct{ contentType, key string }{
		{"", ""}, {"application/json", ""}, {"", "pay-chunked-key"},
	} {
		req := httptest.NewRequest("POST", "/api/v1/products/1/buy", strings.NewReader(fmt.Sprintf(`{"user_id":"pay-chunked-%d"}`, i)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var o struct {
			OrderNo string `json:"order_no"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil || rec.Code != http.StatusCreated {
			t.Fatalf("buy answered %d %s", rec.Code, rec.Body)
		}
		req = httptest.NewRequest("POST", "/api/v1/orders/"+o.OrderNo+"/pay", strings.NewReader(""))
		req.ContentLength, req.TransferEncoding = -1, []string{"chunked"}
		if step.contentType != "" {
			req.Header.Set("Content-Type", step.contentType)
		}
		if step.key != "" {
			req.Header.Set("Idempotency-Key", step.key)
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("an empty chunked payment (Content-Type %q, key %q): %d %s, want 200", step.contentType, step.key, rec.Code, rec.Body)
		}
	}
}
