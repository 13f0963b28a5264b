package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/embedded"
	"github.com/seckill-lab/seckill/internal/store"
)

const catalogueAbout = `Load a test catalogue: make items 1 to N exist, creating the missing ones
in bulk (multi-row INSERTs) with -stock units each, always on sale. Existing
and archived items are left as they are. The database is SECKILL_MYSQL_DSN
when it is set, else the demo's SQLite file (SECKILL_DEMO_DB). A Redis copy
of a new item is made on its first buy.`

// runCatalogue loads a test catalogue of -items items.
func runCatalogue(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("catalogue", "", catalogueAbout, true)
	items := c.fs.Int("items", 1000, "how many items the catalogue holds: ids 1 to N")
	stock := c.fs.Int("stock", 100, "units each new item is created with")
	kind := c.fs.String("kind", "product", "product or coupon")
	if err := c.parse(args, stdout); err != nil {
		return err
	}
	switch {
	case *items < 0 || *items > 10_000_000:
		return fmt.Errorf("%w: -items %d must be between 0 and 10000000", errUsage, *items)
	case *stock < 0 || *stock > 1_000_000_000:
		return fmt.Errorf("%w: -stock %d must be between 0 and 1000000000", errUsage, *stock)
	case *kind != "product" && *kind != "coupon":
		return fmt.Errorf("%w: -kind %q must be product or coupon", errUsage, *kind)
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	var db *store.DB
	where := cfg.DemoDB
	if cfg.MySQLDSN != "" {
		where = "SECKILL_MYSQL_DSN"
		db, err = openMySQL(ctx, cfg.MySQLDSN, store.Pool{MaxConns: cfg.MySQLMaxConns, MaxLifetime: cfg.MySQLConnLifetime})
	} else {
		db, err = embedded.OpenSQL(ctx, cfg.DemoDB)
	}
	if err != nil {
		return err
	}
	ledger := db.Products()
	if *kind == "coupon" {
		ledger = db.Coupons()
	}
	start := time.Now()
	created, err := ledger.LoadCatalogue(ctx, *items, *stock)
	if err != nil {
		return errors.Join(fmt.Errorf("load the catalogue: %w", err), db.Close())
	}
	fmt.Fprintf(stdout, "%s 1 to %d: %d created in %v (%s)\n", *kind, *items, created, time.Since(start).Round(time.Millisecond), where)
	return db.Close()
}
