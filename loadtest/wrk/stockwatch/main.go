// Command stockwatch reads one product's stock in MySQL every 2 ms for a
// while and prints how long the stock took to go from its first change to
// its last: the sell-out time as the database saw it. (An order's
// created_at is when its buy was accepted, not when it was written.)
//
//	stockwatch -dsn 'root:@tcp(127.0.0.1:3306)/seckill_wrk' -for 5s -product 1
package main

import (
	"database/sql"
	"flag"
	"fmt"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func main() {
	dsn := flag.String("dsn", "", "MySQL DSN of the fleet's database")
	watch := flag.Duration("for", 5*time.Second, "how long to watch")
	product := flag.Int64("product", 1, "product id")
	flag.Parse()
	if err := run(*dsn, *watch, *product); err != nil {
		fmt.Fprintln(os.Stderr, "stockwatch:", err)
		os.Exit(1)
	}
}

func run(dsn string, watch time.Duration, product int64) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var first, last time.Time
	prev := -1
	for end := time.Now().Add(watch); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		var stock int
		if err := db.QueryRow("SELECT stock FROM products WHERE id = ?", product).Scan(&stock); err != nil {
			return err
		}
		if now := time.Now(); prev >= 0 && stock != prev {
			if first.IsZero() {
				first = now
			}
			last = now
		}
		prev = stock
	}
	if first.IsZero() {
		fmt.Println("selltime=none")
		return nil
	}
	fmt.Printf("selltime=%.3fs\n", last.Sub(first).Seconds())
	return nil
}
