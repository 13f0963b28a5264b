package api

import _ "embed" // the OpenAPI document is compiled in

// OpenAPI is the OpenAPI 3.0.3 document of the HTTP API, served at
// GET /api/v1/openapi.json. It is generated, not written by hand: the
// schemas are reflected from the types of this package and the problem
// types from internal/httpapi's error table (see openapi_gen_test.go in
// internal/httpapi; `go generate ./internal/api` rewrites it, and a test
// fails while the committed file differs from what the code generates).
//
//go:embed openapi.json
var OpenAPI []byte

//go:generate go test ../httpapi -run ^TestOpenAPIFileIsGenerated$ -args -update-openapi
