// Package web holds the dashboard and workshop pages, embedded into the
// binary so that `seckill demo` and `seckill serve` need no files beside it.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

// The stage pages' shared experiment block is rendered from
// stage-experiment.html.tmpl; TestStagePagesAreGenerated checks it.
//go:generate go test . -run ^TestStagePagesAreGenerated$ -args -update-stage-pages

//go:embed static
var files embed.FS

// Handler serves the static pages.
func Handler() http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.FileServerFS(sub)
}
