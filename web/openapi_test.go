package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
)

// loadOpenAPI loads the published document (internal/api/openapi.json, as
// compiled in) and fails unless it is a valid OpenAPI 3.0 document.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("loading internal/api/openapi.json: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("internal/api/openapi.json is not a valid OpenAPI document: %v", err)
	}
	return doc
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	doc := loadOpenAPI(t)
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
}

// TestOpenAPIListsEveryRoute compares the operations of the OpenAPI
// document with the routes internal/httpapi registers: each must list the
// other's.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	code := codeRoutes(t)
	var doc []string
	for path, item := range loadOpenAPI(t).Paths.Map() {
		for method := range item.Operations() {
			doc = append(doc, method+" "+path)
		}
	}
	for _, r := range code {
		if !slices.Contains(doc, r) {
			t.Errorf("%s is registered in internal/httpapi but missing from the OpenAPI document (internal/httpapi/openapi_gen_test.go lists the operations)", r)
		}
	}
	for _, r := range doc {
		if !slices.Contains(code, r) {
			t.Errorf("the OpenAPI document lists %s, which internal/httpapi does not register", r)
		}
	}
	// Former names are accepted, not documented: each answers as a route
	// the document lists, and is named in CHANGELOG.md.
	changelog, err := os.ReadFile(filepath.Join("..", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	for old, now := range httpapi.RouteAliases {
		_, oldPath, _ := strings.Cut(old, " ")
		if slices.Contains(doc, old) || slices.Contains(code, old) {
			t.Errorf("the former route %s is documented or registered as a route; it is an alias of %s", old, now)
		}
		if !slices.Contains(doc, now) {
			t.Errorf("the former route %s answers as %s, which the document does not list", old, now)
		}
		if !strings.Contains(string(changelog), oldPath) {
			t.Errorf("CHANGELOG.md does not list the former route %s", old)
		}
	}
}

// contract checks answers against the OpenAPI document.
type contract struct {
	doc    *openapi3.T
	router routers.Router
}

func newContract(t *testing.T) *contract {
	t.Helper()
	doc := loadOpenAPI(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{doc: doc, router: router}
}

var strict = &openapi3filter.Options{
	// An answer whose status the document does not list is a mismatch.
	IncludeResponseStatus: true,
	MultiError:            true,
	// The admin token is the demo's; the document only says which
	// operations need one.
	AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
}

// route finds the operation of req. A path no operation has is answered
// by the document's RouteNotFound answer. A path with no operation for the
// method is answered 405 method-not-allowed with Allow: OpenAPI 3.0 has no
// place for an answer outside the operations, so the document lists that
// type in ProblemType only, and the checker builds the answer from it.
func (k *contract) route(req *http.Request) (*routers.Route, map[string]string, error) {
	route, params, err := k.router.FindRoute(req)
	if err == nil {
		return route, params, nil
	}
	var answer *openapi3.ResponseRef
	var status int
	switch {
	case errors.Is(err, routers.ErrMethodNotAllowed):
		status = http.StatusMethodNotAllowed
		answer, err = k.methodNotAllowed()
		if err != nil {
			return nil, nil, err
		}
	case errors.Is(err, routers.ErrPathNotFound):
		status = http.StatusNotFound
		answer = k.doc.Components.Responses["RouteNotFound"]
		if answer == nil {
			return nil, nil, errors.New("the document has no RouteNotFound answer")
		}
	default:
		return nil, nil, err
	}
	op := &openapi3.Operation{Responses: openapi3.NewResponses(openapi3.WithStatus(status, answer))}
	return &routers.Route{Spec: k.doc, Path: req.URL.Path, Method: req.Method, Operation: op}, nil, nil
}

// methodNotAllowed is the 405 answer: a Problem of the document whose
// type is method-not-allowed (which ProblemType must list), with Allow.
func (k *contract) methodNotAllowed() (*openapi3.ResponseRef, error) {
	const slug = api.ProblemTypePrefix + "method-not-allowed"
	problem, types := k.doc.Components.Schemas["Problem"], k.doc.Components.Schemas["ProblemType"]
	if problem == nil || types == nil || !slices.Contains(types.Value.Enum, any(slug)) {
		return nil, fmt.Errorf("the document's ProblemType does not list %s", slug)
	}
	typeIs := openapi3.NewStringSchema()
	typeIs.Enum = []any{slug}
	statusIs := openapi3.NewIntegerSchema()
	statusIs.Enum = []any{float64(http.StatusMethodNotAllowed)}
	body := openapi3.NewAllOfSchema(problem.Value, openapi3.NewObjectSchema().WithProperty("type", typeIs).WithProperty("status", statusIs))
	allow := &openapi3.Header{Parameter: openapi3.Parameter{Required: true, Schema: openapi3.NewStringSchema().WithPattern(`^[A-Z]+(, ?[A-Z]+)*$`).NewRef()}}
	answer := openapi3.NewResponse().WithDescription("method-not-allowed").
		WithContent(openapi3.NewContentWithSchema(body, []string{"application/problem+json"}))
	answer.Headers = openapi3.Headers{"Allow": &openapi3.HeaderRef{Value: allow}}
	return &openapi3.ResponseRef{Value: answer}, nil
}

// checkRequest validates a request against the document.
func (k *contract) checkRequest(req *http.Request, body []byte) error {
	route, params, err := k.route(req)
	if err != nil {
		return err
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: strict})
}

// checkAnswer validates an answer (status, declared headers, body) against
// the document.
func (k *contract) checkAnswer(req *http.Request, resp *http.Response, body []byte) error {
	route, params, err := k.route(req)
	if err != nil {
		return err
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: strict},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                strict,
	}
	in.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), in)
}

// TestOpenAPIAnswersMatch sends the examples of docs/api.md, the
// workshop's steps under every stage, and requests that fail in the ways a
// client meets (sold out, a bad body, an unknown route, a wrong method,
// ...) to an instance of `seckill demo`, and checks every answer against
// the OpenAPI document: its status is listed for the operation, the
// headers the document declares are there and well-formed, and the body
// matches the schema (problems included). The document must also be what
// every instance serves at /api/v1/openapi.json.
func TestOpenAPIAnswersMatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the demo; skipped with -short")
	}
	k := newContract(t)
	reports := t.TempDir()
	const run = "20250101-000000"
	if err := os.MkdirAll(filepath.Join(reports, run), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(reports, run, "results.json"), []byte(`{"rows":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	front := startDemo(t, "SECKILL_LAB_REPORTS="+reports)
	instances := demoInstances(t, front)
	inst := instances[0]

	checked := map[string]bool{} // the operations whose answers were checked
	// send sends a request, checks its answer against the document (and
	// the request too, when valid says it is one of the documented
	// examples), and returns the answer.
	send := func(valid bool, method, path string, header http.Header, body string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, inst+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for h, v := range header {
			req.Header[h] = v
		}
		what := method + " " + path + " " + body
		if valid {
			if err := k.checkRequest(req, []byte(body)); err != nil {
				t.Errorf("%s: the request does not match the OpenAPI document: %v", what, err)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer resp.Body.Close()
		answer, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: read the answer: %v", what, err)
		}
		if err := k.checkAnswer(req, resp, answer); err != nil {
			t.Errorf("%s: the answer %d does not match the OpenAPI document: %v\n%s", what, resp.StatusCode, err, answer)
		}
		if route, _, err := k.router.FindRoute(req); err == nil {
			checked[method+" "+route.Path] = true
		}
		return resp, answer
	}
	keyed := func(key string) http.Header { return http.Header{"Idempotency-Key": {key}} }

	// The examples of the API table, in its order, as one buyer: the
	// payment pays the order the buy made.
	const buyer = "openapi-buyer"
	orderNo := ""
	for _, r := range apiDocRoutes(t) {
		fill := strings.NewReplacer("{id}", "1", "{slug}", "sold-out", "{run}", run, "{file}", "results.json", "{name}", "cmdline", "{order_no}", orderNo)
		body := strings.ReplaceAll(r.body, "…", buyer)
		path := fill.Replace(r.path)
		if strings.HasSuffix(r.path, "/archive") {
			path = archivable(t, r.path, func(method, path, body string) int {
				resp, _ := send(true, method, path, nil, body)
				return resp.StatusCode
			})
		}
		resp, answer := send(true, r.method, path, nil, body)
		if strings.HasSuffix(r.path, "/products/{id}/buy") && resp.StatusCode == http.StatusCreated {
			var o api.Order
			if err := json.Unmarshal(answer, &o); err != nil {
				t.Fatal(err)
			}
			orderNo = o.OrderNo
		}
	}
	if orderNo == "" {
		t.Fatal("the buy example made no order")
	}
	// The table's example turned this instance's rate limit on; the
	// requests below are one client's and must not meet it.
	if resp, answer := send(true, "PUT", "/api/v1/admin/rate-limit", nil, `{"interval_ms":0}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("turning the rate limit off: %d %s", resp.StatusCode, answer)
	}

	// The document, as every instance serves it.
	for _, u := range instances {
		resp, err := http.Get(u + "/api/v1/openapi.json")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/json" || !bytes.Equal(got, api.OpenAPI) {
			t.Errorf("%s/api/v1/openapi.json: %d %q, %d bytes; want 200 application/json with internal/api/openapi.json", u, resp.StatusCode, ct, len(got))
		}
	}

	// The workshop's steps (web/static/workshop): switch the fleet, restock,
	// burst; and a buy and its order, under every stage.
	var info api.Info
	if _, answer := send(true, "GET", "/api/v1/info", nil, ""); json.Unmarshal(answer, &info) != nil || len(info.Stages) == 0 {
		t.Fatalf("GET /api/v1/info = %s", answer)
	}
	for i, stage := range info.Stages {
		send(true, "PUT", "/api/v1/admin/fleet/stage", nil, `{"stage":"`+stage+`"}`)
		send(true, "POST", "/api/v1/admin/products/1/reset", nil, `{"stock":10}`)
		send(true, "POST", "/api/v1/admin/burst", nil, `{"kind":"product","item_id":1,"n":20}`)
		send(true, "POST", "/api/v1/admin/coupons/1/reset", nil, `{"stock":5}`)
		send(true, "POST", "/api/v1/admin/burst", nil, `{"kind":"coupon","item_id":1,"n":10,"stage":"`+stage+`"}`)
		send(true, "POST", "/api/v1/admin/products/1/reset", nil, `{"stock":10}`)
		user := fmt.Sprintf("openapi-stage-%d", i)
		resp, answer := send(true, "POST", "/api/v1/products/1/buy", keyed("k-"+user), `{"user_id":"`+user+`","quantity":2}`)
		send(true, "POST", "/api/v1/products/1/buy", keyed("k-"+user), `{"user_id":"`+user+`","quantity":2}`) // replayed
		send(true, "POST", "/api/v1/coupons/1/grab", nil, `{"user_id":"`+user+`"}`)
		var o api.Order
		if err := json.Unmarshal(answer, &o); err != nil || o.OrderNo == "" {
			t.Errorf("buy under %s: %d %s", stage, resp.StatusCode, answer)
			continue
		}
		send(true, "GET", "/api/v1/orders/"+o.OrderNo, nil, "")
		send(true, "POST", "/api/v1/orders/"+o.OrderNo+"/pay", keyed("pay-"+user), "")
		send(true, "POST", "/api/v1/orders/"+o.OrderNo+"/pay", keyed("pay-"+user), "") // replayed
	}
	send(true, "PUT", "/api/v1/admin/fleet/stage", nil, `{"stage":"db-atomic"}`)

	// Answers that are problems.
	send(true, "POST", "/api/v1/admin/products/2/reset", nil, `{"stock":1}`)
	send(true, "POST", "/api/v1/products/2/buy", nil, `{"user_id":"first"}`)
	failures := []struct {
		method, path string
		header       http.Header
		body         string
		want         int
	}{
		{"POST", "/api/v1/products/2/buy", nil, `{"user_id":"second"}`, http.StatusConflict},                   // sold out
		{"POST", "/api/v1/products/2/buy", keyed("sold-out"), `{"user_id":"third"}`, http.StatusConflict},      // sold out, keyed
		{"POST", "/api/v1/products/1/buy", nil, `{"user_id":"first"}`, http.StatusCreated},                     // a first buy ...
		{"POST", "/api/v1/products/1/buy", nil, `{"user_id":"first"}`, http.StatusConflict},                    // ... and a second
		{"POST", "/api/v1/products/1/buy", nil, `{"user_id":`, http.StatusBadRequest},                          // malformed
		{"POST", "/api/v1/products/1/buy", nil, `{"user_id":"a","extra":1}`, http.StatusBadRequest},            // unknown field
		{"POST", "/api/v1/products/1/buy", nil, `{"user_id":"a","quantity":11}`, http.StatusBadRequest},        // out of range
		{"POST", "/api/v1/products/abc/buy", nil, `{"user_id":"a"}`, http.StatusBadRequest},                    // bad id
		{"POST", "/api/v1/products/999/buy", nil, `{"user_id":"a"}`, http.StatusNotFound},                      // no such product
		{"POST", "/api/v1/products/1/buy", http.Header{"Content-Type": {"text/plain"}}, `x`, 415},              // not JSON
		{"POST", "/api/v1/products/1/buy", http.Header{"X-Seckill-Stage": {"nope"}}, `{"user_id":"a"}`, 400},   // unknown mode
		{"POST", "/api/v1/products/1/buy", keyed(strings.Repeat("k", 256)), `{"user_id":"key-user"}`, 400},     // bad key
		{"POST", "/api/v1/products/1/buy", keyed("reused"), `{"user_id":"key-user"}`, http.StatusCreated},      // a key ...
		{"POST", "/api/v1/products/1/buy", keyed("reused"), `{"user_id":"key-user","quantity":2}`, 422},        // ... reused
		{"POST", "/api/v1/coupons/1/grab", nil, `{"user_id":"a","quantity":1}`, http.StatusBadRequest},         // grabs have no quantity
		{"POST", "/api/v1/products/1/buy", nil, `{"user_id":"` + strings.Repeat("x", 70<<10) + `"}`, 413},      // too large
		{"GET", "/api/v1/products/999", nil, "", http.StatusNotFound},                                          // no such product
		{"GET", "/api/v1/products?limit=0", nil, "", http.StatusBadRequest},                                    // a page of nothing
		{"GET", "/api/v1/coupons?state=gone", nil, "", http.StatusBadRequest},                                  // no such state
		{"PUT", "/api/v1/admin/products/901", nil, `{"name":"x","price_cents":-1,"stock":1}`, 400},             // a negative price
		{"PUT", "/api/v1/admin/products/900", nil, `{"name":"x","price_cents":1,"stock":1}`, 409},              // archived by the table's example
		{"POST", "/api/v1/admin/sessions", nil, `{"items":[{"id":1,"stock":-1}]}`, http.StatusBadRequest},      // a negative stock
		{"GET", "/api/v1/coupons/999/audit", nil, "", http.StatusNotFound},                                     // no such batch
		{"GET", "/api/v1/orders/O-nope", nil, "", http.StatusNotFound},                                         // no such order
		{"GET", "/api/v1/orders/bad!number", nil, "", http.StatusBadRequest},                                   // not an order number
		{"POST", "/api/v1/orders/O-nope/pay", nil, "", http.StatusNotFound},                                    // no such order
		{"POST", "/api/v1/orders/" + orderNo + "/pay", nil, `{"user_id":"someone-else"}`, http.StatusNotFound}, // another's order
		{"PUT", "/api/v1/admin/stage", nil, `{"stage":"nope"}`, http.StatusBadRequest},                         // unknown mode
		{"PUT", "/api/v1/admin/stage", nil, `{}`, http.StatusBadRequest},                                       // no mode
		{"POST", "/api/v1/admin/burst", nil, `{"item_id":1,"n":0}`, http.StatusBadRequest},                     // no buyers
		{"POST", "/api/v1/admin/products/1/reset", nil, `{"stock":"ten"}`, http.StatusBadRequest},              // wrong type
		{"GET", "/api/v1/admin/redis-ping", http.Header{"Authorization": {"Bearer wrong"}}, "", 403},           // wrong token
		{"GET", "/api/v1/admin/redis-ping", http.Header{"Authorization": {""}}, "", 401},                       // no token
		{"GET", "/problems/no-such-problem", nil, "", http.StatusNotFound},                                     // unknown type
		{"GET", "/problems/sold-out", http.Header{"Accept": {"application/json"}}, "", http.StatusOK},          // as JSON
		{"GET", "/api/v1/lab/runs/" + run + "/nope.json", nil, "", http.StatusNotFound},                        // no such file
		{"GET", "/api/v1/no-such-route", nil, "", http.StatusNotFound},                                         // unknown route
		{"GET", "/no-such-page", nil, "", http.StatusNotFound},                                                 // unknown page
		{"DELETE", "/api/v1/products/1", nil, "", http.StatusMethodNotAllowed},                                 // wrong method
		{"GET", "/api/v1/products/1/buy", nil, "", http.StatusMethodNotAllowed},                                // wrong method
		{"HEAD", "/healthz", nil, "", http.StatusOK},                                                           // HEAD is GET without the body (kin-openapi skips HEAD answers; the status is checked here)
	}
	for _, f := range failures {
		if resp, answer := send(false, f.method, f.path, f.header, f.body); resp.StatusCode != f.want {
			t.Errorf("%s %s %.60s: %d %s, want %d", f.method, f.path, f.body, resp.StatusCode, answer, f.want)
		}
	}

	// Every operation of the document was exercised.
	for path, item := range k.doc.Paths.Map() {
		for method := range item.Operations() {
			if !checked[method+" "+path] {
				t.Errorf("no answer of %s %s was checked", method, path)
			}
		}
	}
}

// TestOpenAPIContractCatchesMismatches feeds the checker of
// TestOpenAPIAnswersMatch answers made up to break the document in one way
// each, and one that keeps it, so a checker that lets everything pass
// cannot go unnoticed.
func TestOpenAPIContractCatchesMismatches(t *testing.T) {
	k := newContract(t)
	order := `{"order_no":"O1","product_id":1,"user_id":"a","quantity":1,"stage":"db-atomic","instance":"i1","created_at":"2026-11-26T10:00:00Z","status":"confirmed"}`
	header := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	created := func() http.Header {
		return header("Content-Type", "application/json; charset=utf-8", "X-Seckill-Instance", "i1", "X-Seckill-Stage", "db-atomic", "Location", "/api/v1/orders/O1")
	}
	problem := func(status int, slug string) string {
		return fmt.Sprintf(`{"type":"/problems/%s","title":"t","status":%d}`, slug, status)
	}
	cases := []struct {
		name         string
		method, path string
		status       int
		header       http.Header
		body         string
		ok           bool
	}{
		{"a 201 order as documented", "POST", "/api/v1/products/1/buy", 201, created(), order, true},
		{"an order without its number", "POST", "/api/v1/products/1/buy", 201, created(), strings.Replace(order, `"order_no":"O1",`, "", 1), false},
		{"a time that is not a date-time", "POST", "/api/v1/products/1/buy", 201, created(), strings.Replace(order, "2026-11-26T10:00:00Z", "yesterday", 1), false},
		{"a status the operation does not list", "POST", "/api/v1/products/1/buy", 418, created(), order, false},
		{"a 201 without Location", "POST", "/api/v1/products/1/buy", 201, func() http.Header { h := created(); h.Del("Location"); return h }(), order, false},
		{"a stage that does not exist", "POST", "/api/v1/products/1/buy", 201, func() http.Header { h := created(); h.Set("X-Seckill-Stage", "nope"); return h }(), order, false},
		{"a sold-out problem", "POST", "/api/v1/products/1/buy", 409, header("Content-Type", "application/problem+json", "X-Seckill-Instance", "i1"), problem(409, "sold-out"), true},
		{"a problem type another status has", "POST", "/api/v1/products/1/buy", 409, header("Content-Type", "application/problem+json"), problem(409, "timeout"), false},
		{"a problem as plain JSON", "POST", "/api/v1/products/1/buy", 409, header("Content-Type", "application/json"), problem(409, "sold-out"), false},
		{"a 503 without Retry-After", "GET", "/readyz", 503, header("Content-Type", "application/problem+json"), problem(503, "not-ready"), false},
		{"a 405 problem", "DELETE", "/api/v1/products/1", 405, header("Content-Type", "application/problem+json", "Allow", "GET"), problem(405, "method-not-allowed"), true},
		{"a 405 without Allow", "DELETE", "/api/v1/products/1", 405, header("Content-Type", "application/problem+json"), problem(405, "method-not-allowed"), false},
		{"a 405 in plain text", "DELETE", "/api/v1/products/1", 405, header("Content-Type", "text/plain"), "405 method not allowed", false},
		{"an unknown route's 404 problem", "GET", "/nowhere", 404, header("Content-Type", "application/problem+json"), problem(404, "route-not-found"), true},
		{"an unknown route's 404 with another type", "GET", "/nowhere", 404, header("Content-Type", "application/problem+json"), problem(404, "not-found"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, "http://127.0.0.1:1"+c.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = k.checkAnswer(req, &http.Response{StatusCode: c.status, Header: c.header}, []byte(c.body))
			if c.ok && err != nil {
				t.Errorf("the checker refuses an answer that keeps the document: %v", err)
			}
			if !c.ok && err == nil {
				t.Error("the checker passes an answer that breaks the document")
			}
		})
	}
}
