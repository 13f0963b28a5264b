package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/embedded"
)

func TestCatalogueCommandLoadsTheDemoDatabase(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "seckill.db")
	env := func(k string) string {
		if k == "SECKILL_DEMO_DB" {
			return file
		}
		return ""
	}
	for _, want := range []string{"1500 created", "0 created"} { // the second run finds them all
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"catalogue", "-items", "1502", "-stock", "7"}, env, &out, &errOut); err != nil {
			t.Fatalf("catalogue: %v (%s)", err, errOut.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Fatalf("catalogue said %q, want %q", out.String(), want)
		}
	}
	db, err := embedded.OpenSQL(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	items, err := db.Products().List(context.Background())
	if err != nil || len(items) != 1502 || items[1501].ID != 1502 || items[1501].Stock != 7 {
		t.Fatalf("%d items (%v), want 1502, the last with stock 7", len(items), err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"catalogue", "-items", "-1"}, env, &out, &errOut); err == nil {
		t.Fatal("-items -1 was accepted")
	}
}
