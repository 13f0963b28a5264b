// Command catsweep measures what one idle instance costs as its catalogue
// grows: for each catalogue size, it fills the catalogue (seckill
// catalogue, bulk insert), starts one `seckill serve` on MySQL and a
// private redis-server (or `seckill demo` on SQLite), times it until
// ready, and over an idle window reads the instance's CPU and RSS
// (/proc/<pid>/stat) and its Redis's commands and CPU (INFO). It writes a
// markdown table, a chart and results.json. The goal is a flat line: an
// idle item should cost nothing (issue 60).
//
//	go run ./loadtest/catsweep -bin bin/seckill -sizes 1000,10000,100000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the sweep's settings, from its flags.
type options struct {
	bin          string
	fleet        string // serve or demo
	sizes        []int
	dsn          string
	out          string
	window       time.Duration
	settle       time.Duration
	readyTimeout time.Duration
	label        string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "catsweep:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	// The catalogue grows from one size to the next: start from none.
	if o.fleet == "serve" {
		if err := freshDatabase(ctx, o.dsn); err != nil {
			return err
		}
	} else if err := os.RemoveAll(filepath.Join(o.out, "demo")); err != nil {
		return err
	}
	var points []point
	for _, n := range o.sizes {
		p, err := measure(ctx, o, n)
		if err != nil {
			return fmt.Errorf("%d items: %w", n, err)
		}
		fmt.Fprintln(stdout, p.summary())
		points = append(points, p)
	}
	return write(o, points, stdout)
}

func parseFlags(args []string, stdout io.Writer) (options, error) {
	fs := flag.NewFlagSet("catsweep", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var o options
	sizes := fs.String("sizes", "1000,10000,100000", "comma-separated catalogue sizes, ascending: the catalogue grows from one to the next")
	fs.StringVar(&o.bin, "bin", "bin/seckill", "the seckill binary")
	fs.StringVar(&o.fleet, "fleet", "serve", "serve (one seckill serve on MySQL and a private redis-server) or demo (seckill demo on SQLite)")
	fs.StringVar(&o.dsn, "dsn", "root:@tcp(127.0.0.1:3306)/catsweep", "MySQL DSN for -fleet serve; its database, whose name must start with catsweep, is dropped and created afresh")
	fs.StringVar(&o.out, "out", "test-artifacts/catalogue-sweep", "directory for catalogue-sweep.md, catalogue-sweep.svg, results.json and the logs")
	fs.DurationVar(&o.window, "window", 10*time.Second, "the idle window measured")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "wait between ready and the window")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 60*time.Second, "give up waiting for ready after this; the window is measured anyway, marked not ready")
	fs.StringVar(&o.label, "label", "", "names the run in the table and chart (e.g. the commit)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.sizes, err = parseSizes(*sizes); err != nil {
		return o, err
	}
	if o.fleet != "serve" && o.fleet != "demo" {
		return o, fmt.Errorf("-fleet %q: want serve or demo", o.fleet)
	}
	if o.window <= 0 {
		return o, errors.New("-window must be positive")
	}
	return o, nil
}

// parseSizes reads "1000,10000,100000": positive and ascending, since the
// catalogue only grows between sizes.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-sizes: %q is not a positive count", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-sizes: %d after %d; sizes must ascend", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}
