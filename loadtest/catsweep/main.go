// Command catsweep measures what one idle instance costs as its catalogue
// grows: for each catalogue size, it fills the catalogue (seckill
// catalogue, bulk insert), starts one `seckill serve` on MySQL and a
// private redis-server (or `seckill demo` on SQLite), times it until
// ready, and over an idle window reads the instance's CPU and RSS
// (/proc/<pid>/stat) and its Redis's commands and CPU (INFO). With
// -instances N it starts N serve on the same database and Redis, each
// measured; with -bursts K it then sells K random products out, checks
// each sold exactly against the database, and measures the idle window
// again. It writes a markdown table, a chart and results.json, and ends
// with a PASS or FAIL line per acceptance bound. The goal is a flat line:
// an idle item should cost nothing (issue 60).
//
//	go run ./loadtest/catsweep -bin bin/seckill -sizes 1000,10000,100000 -instances 3 -bursts 20
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
	instances    int
	bursts       int
	seed         int64
	stage        string
	burstStock   int
	burstBuyers  int
	inFlight     int
	after        time.Duration
}

// stageName names the stage the buyers met.
func (o options) stageName() string {
	if o.stage == "" {
		return "default"
	}
	return o.stage
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
	if o.bursts > 0 {
		fmt.Fprintf(stdout, "bursts: %d products per size, seed %d (-seed %d repeats the draw)\n", o.bursts, o.seed, o.seed)
	}
	var runs []sizeRun
	for _, n := range o.sizes {
		r, err := measure(ctx, o, n)
		if err != nil {
			return fmt.Errorf("%d items: %w", n, err)
		}
		for _, p := range r.Points {
			fmt.Fprintln(stdout, p.summary())
		}
		for _, b := range r.Bursts {
			fmt.Fprintln(stdout, b.summary())
		}
		runs = append(runs, r)
	}
	vs := verdicts(o, runs)
	if err := write(o, runs, vs, stdout); err != nil {
		return err
	}
	for _, v := range vs {
		fmt.Fprintln(stdout, v.line())
		if !v.Pass {
			err = errFailed
		}
	}
	return err
}

// errFailed ends a sweep that measured everything but failed a bound.
var errFailed = errors.New("an acceptance bound failed (see the FAIL lines)")

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
	fs.IntVar(&o.instances, "instances", 1, "how many seckill serve run on the same database and Redis, each measured (-fleet serve)")
	fs.IntVar(&o.bursts, "bursts", 0, "after the idle window, sell this many random products out (one session restocks them, then a burst each) and measure the idle window again")
	fs.Int64Var(&o.seed, "seed", 0, "seed of the products' draw; 0 picks one from the clock (printed)")
	fs.StringVar(&o.stage, "stage", "", "SECKILL_STAGE of the instances; empty for the default")
	fs.IntVar(&o.burstStock, "burst-stock", 100, "each burst product's stock")
	fs.IntVar(&o.burstBuyers, "burst-buyers", 300, "distinct buyers per burst, spread over the instances")
	fs.IntVar(&o.inFlight, "in-flight", 64, "buys in flight at once during a burst")
	fs.DurationVar(&o.after, "after", 20*time.Second, "wait between the last burst and the second idle window")
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
	return o, checkBurstFlags(&o)
}

// checkBurstFlags refuses counts the sweep cannot run, and draws a seed.
func checkBurstFlags(o *options) error {
	switch {
	case o.instances < 1:
		return errors.New("-instances must be at least 1")
	case o.fleet == "demo" && o.instances != 1:
		return errors.New("-instances: the demo is one process (three instances inside); run it with -instances 1")
	case o.bursts < 0 || o.bursts > 1000:
		return errors.New("-bursts must be between 0 and 1000 (one session)")
	case o.bursts > 0 && (o.burstStock < 1 || o.burstBuyers < 1 || o.inFlight < 1):
		return errors.New("-burst-stock, -burst-buyers and -in-flight must be positive")
	}
	if o.seed == 0 {
		o.seed = time.Now().UnixNano() % 1_000_000
	}
	return nil
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
