package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/api"
)

// apiDocRoute is one route of the API table in docs/api.md, with the
// example body written next to it, if any.
type apiDocRoute struct {
	method, path, body string
}

func (r apiDocRoute) String() string { return r.method + " " + r.path }

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	routeToken = regexp.MustCompile(`^(GET|POST|PUT|PATCH|DELETE|HEAD) (/\S*)$`)
	// registered matches a gin registration such as api.GET("/info", ...).
	registered = regexp.MustCompile(`\b(\w+)\.(GET|POST|PUT|PATCH|DELETE|HEAD)\("([^"]+)"`)
	ginParam   = regexp.MustCompile(`[:*](\w+)`)
)

// apiTableHeader is the header row of the API table in docs/api.md.
const apiTableHeader = "| method and path | answer |"

// apiDocRoutes reads the first cell of every row of the API table in
// docs/api.md: the rows under its header, up to the first line that is not
// a table row.
func apiDocRoutes(t *testing.T) []apiDocRoute {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	start := slices.Index(lines, apiTableHeader)
	if start < 0 {
		t.Fatalf("docs/api.md has no table headed %q", apiTableHeader)
	}
	var routes []apiDocRoute
	for _, line := range lines[start+1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
			tok := m[1]
			switch {
			case routeToken.MatchString(tok):
				r := routeToken.FindStringSubmatch(tok)
				routes = append(routes, apiDocRoute{method: r[1], path: r[2]})
			case strings.HasPrefix(tok, "{") && len(routes) > 0:
				routes[len(routes)-1].body = tok
			}
		}
	}
	if len(routes) == 0 {
		t.Fatal("found no routes in the API table of docs/api.md")
	}
	return routes
}

// TestAPIDocListsEveryRoute compares the API table of docs/api.md with the routes
// internal/httpapi registers (routes.go, burst.go and orders.go): each must list the
// other's, so a new route cannot go undocumented, nor a removed one stay.
func TestAPIDocListsEveryRoute(t *testing.T) {
	code := codeRoutes(t)
	var doc []string
	for _, r := range apiDocRoutes(t) {
		doc = append(doc, r.String())
	}
	for _, r := range code {
		if !slices.Contains(doc, r) {
			t.Errorf("%s is registered in internal/httpapi but missing from the API table of docs/api.md", r)
		}
	}
	for _, r := range doc {
		if !slices.Contains(code, r) {
			t.Errorf("the API table of docs/api.md lists %s, which internal/httpapi does not register", r)
		}
	}
}

// codeRoutes reads the routes internal/httpapi registers, as "METHOD
// /path/{param}", from the gin registrations in routes.go, burst.go and
// orders.go.
func codeRoutes(t *testing.T) []string {
	t.Helper()
	prefixes := map[string]string{"r": "", "api": "/api/v1", "admin": "/api/v1/admin"}
	var code []string
	for _, file := range []string{"routes.go", "burst.go", "orders.go"} {
		src, err := os.ReadFile(filepath.Join("..", "internal", "httpapi", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range registered.FindAllStringSubmatch(string(src), -1) {
			prefix, ok := prefixes[m[1]]
			if !ok {
				t.Fatalf("%s registers %s %s on %q, a router this test does not know: add its prefix", file, m[2], m[3], m[1])
			}
			code = append(code, m[2]+" "+prefix+ginParam.ReplaceAllString(m[3], "{$1}"))
		}
	}
	if len(code) < 10 {
		t.Fatalf("found only %d routes in internal/httpapi: %q", len(code), code)
	}
	return code
}

// takesBody reports whether the OpenAPI document gives the route a request
// body (an archive has none).
func takesBody(t *testing.T, r apiDocRoute) bool {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody json.RawMessage `json:"requestBody"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	op, ok := doc.Paths[r.path][strings.ToLower(r.method)]
	return !ok || len(op.RequestBody) > 0
}

// archivable creates an item to archive for the archive route path (its
// {id} left in), through send, and returns the path with its id.
func archivable(t *testing.T, path string, send func(method, path, body string) int) string {
	t.Helper()
	const id = "900"
	put, body := "/api/v1/admin/products/"+id, `{"name":"to archive","price_cents":1,"stock":1}`
	if strings.Contains(path, "/coupons/") {
		put, body = "/api/v1/admin/coupons/"+id, `{"name":"to archive","total":1}`
	}
	if status := send(http.MethodPut, put, body); status/100 != 2 {
		t.Fatalf("PUT %s: %d", put, status)
	}
	return strings.ReplaceAll(path, "{id}", id)
}

// TestAPIDocRoutesAnswer sends every route of the API table of docs/api.md, with
// the example body written next to it, to an instance of `seckill demo`,
// and expects a 2xx; then checks what the table says of the two stage
// switches: PUT /api/v1/admin/stage changes one instance, PUT
// /api/v1/admin/fleet/stage all of them.
func TestAPIDocRoutesAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the demo; skipped with -short")
	}
	// A lab run for the lab routes to serve.
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
	if len(instances) < 2 {
		t.Fatalf("the demo runs %d instances, want several", len(instances))
	}
	inst := instances[0]

	send := func(method, url, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+adminToken) // public routes ignore it
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err != nil {
			t.Fatalf("%s %s: read the answer: %v", method, url, err)
		}
		return resp, string(b)
	}
	// Every example buys as one buyer, so the payment example pays the
	// order the buy example made; {order_no} is that order's number.
	const buyer = "apidoc-buyer"
	orderNo, ticket := "", ""
	for _, r := range apiDocRoutes(t) {
		fill := strings.NewReplacer("{id}", "1", "{slug}", "sold-out", "{run}", run, "{file}", "results.json", "{name}", "", "{order_no}", orderNo)
		body := strings.ReplaceAll(strings.ReplaceAll(r.body, "…", buyer), "{ticket}", ticket)
		if r.method != http.MethodGet && body == "" && takesBody(t, r) {
			t.Errorf("%s: docs/api.md gives no example body", r)
			continue
		}
		if strings.Contains(r.path, "{order_no}") && orderNo == "" {
			t.Errorf("%s: no order to ask about: the table must list the buy route before it", r)
			continue
		}
		path := fill.Replace(r.path)
		if strings.HasSuffix(r.path, "/archive") {
			// Not item 1, which the examples after it (and other tests)
			// still sell: an item of its own, made for it.
			path = archivable(t, r.path, func(method, path, body string) int {
				resp, _ := send(method, inst+path, body)
				return resp.StatusCode
			})
		}
		resp, answer := send(r.method, inst+path, body)
		if resp.StatusCode/100 != 2 {
			t.Errorf("%s %s: %d %s", r, body, resp.StatusCode, answer)
			continue
		}
		if strings.HasSuffix(r.path, "/buy") || strings.HasSuffix(r.path, "/grab") {
			for _, h := range []string{"X-Seckill-Stage", "X-Seckill-Instance"} {
				if resp.Header.Get(h) == "" {
					t.Errorf("%s: the answer has no %s header", r, h)
				}
			}
		}
		if strings.HasSuffix(r.path, "/products/{id}/buy") {
			var o api.Order
			if err := json.Unmarshal([]byte(answer), &o); err != nil || o.OrderNo == "" {
				t.Fatalf("%s: no order_no in %s (%v)", r, answer, err)
			}
			orderNo = o.OrderNo
		}
		if strings.HasSuffix(r.path, "/room/join") {
			var tk api.RoomTicket
			if err := json.Unmarshal([]byte(answer), &tk); err != nil || tk.Ticket == "" {
				t.Fatalf("%s: no ticket in %s (%v)", r, answer, err)
			}
			ticket = tk.Ticket
		}
	}

	// The front page forwards the API and the probes, and lists instances.
	for _, path := range []string{"/api/v1/info", "/healthz", "/readyz", "/demo/instances"} {
		if resp, answer := send(http.MethodGet, front+path, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("front page %s: %d %s", path, resp.StatusCode, answer)
		}
	}

	// The two stage switches.
	modes := func() map[string]string {
		t.Helper()
		_, answer := send(http.MethodGet, inst+"/api/v1/fleet", "")
		var f api.Fleet
		if err := json.Unmarshal([]byte(answer), &f); err != nil || len(f.Peers) != len(instances) {
			t.Fatalf("GET /api/v1/fleet = %s (%v), want %d peers", answer, err, len(instances))
		}
		m := map[string]string{}
		for _, p := range f.Peers {
			m[p.URL] = p.Stage
		}
		return m
	}
	if resp, answer := send(http.MethodPut, front+"/api/v1/admin/fleet/stage", `{"stage":"redis-lock"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("fleet mode: %d %s", resp.StatusCode, answer)
	}
	if resp, answer := send(http.MethodPut, inst+"/api/v1/admin/stage", `{"stage":"db-atomic"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("mode: %d %s", resp.StatusCode, answer)
	}
	m := modes()
	for _, u := range instances {
		want := "redis-lock"
		if u == inst {
			want = "db-atomic"
		}
		if m[u] != want {
			t.Errorf("after PUT /api/v1/admin/stage on %s: %s runs %q, want %q (one instance changes)", inst, u, m[u], want)
		}
	}
	if resp, answer := send(http.MethodPut, front+"/api/v1/admin/fleet/stage", `{"stage":"db-atomic"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("fleet mode: %d %s", resp.StatusCode, answer)
	}
	for u, mode := range modes() {
		if mode != "db-atomic" {
			t.Errorf("after PUT /api/v1/admin/fleet/stage: %s runs %q, want db-atomic on every instance", u, mode)
		}
	}
}
