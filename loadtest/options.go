package main

import (
	"context"
	"io"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/baseline"
	"github.com/seckill-lab/seckill/loadtest/hotrow"
	"github.com/seckill-lab/seckill/loadtest/report"
	"github.com/seckill-lab/seckill/loadtest/scenario"
)

// allStages lists the evolution stages in the order the workshop teaches them.
var allStages = inventory.Stages

// defaultTargets are the three instances `seckill demo` starts.
const defaultTargets = "http://127.0.0.1:8081,http://127.0.0.1:8082,http://127.0.0.1:8083"

// options is the parsed command line: what the attacks need
// (scenario.Config), and what the lab's sequence, its baselines and its
// report need beside.
type options struct {
	scenario.Config
	targets   []string
	scenarios []scenario.Scenario
	// sweep lists the buyers in flight of each round of a sweep, in
	// ascending order; nil runs one round at Workers.
	sweep []int
	// baselines measures the ceilings of package baseline at every level,
	// baselineRequests requests each over HTTP (0: as many as buyers).
	baselines        bool
	baselineRequests int
	// repeat runs the whole lab this many times over (report/repeat.go); round
	// is the round a row belongs to, 1-based, and 0 when there is one.
	repeat int
	round  int
	// confirmWait bounds how long the lab waits, after a burst under a
	// stage that queues its orders (redis-stream), for every accepted
	// order to be written.
	confirmWait time.Duration
	adminToken  string
	reportDir   string
	mysqlDSN    string
	// cpuRedis are the Redis servers whose CPU (INFO CPU) the lab reads
	// around each attack (package cpu), with redisPassword.
	cpuRedis      []string
	redisPassword string
	// soldOutStage is the stage of the sold-out baselines.
	soldOutStage string
	noColor      bool // NO_COLOR is set
	// expectOversell names the stages expected to oversell; nil means
	// "decide per stage": unlocked always, local-mutex when more than one
	// instance answered.
	expectOversell map[string]bool
}

// baseline is what the baselines need of the run: as many requests as a
// burst has buyers, or baselineRequests; the raw loop sells as many units
// as a burst has buyers either way.
func (o options) baseline() baseline.Config {
	c := baseline.Config{Targets: o.targets, Token: o.adminToken, Product: o.Product, SoldOutStage: o.soldOutStage,
		Requests: o.Buyers, HotRowUnits: o.Buyers, Timeout: o.Timeout, MaxDuration: o.MaxDuration,
		// A Redis that does not answer must not hold the raw loop up for
		// a whole request timeout.
		Redis: hotrow.Redis{Addrs: o.cpuRedis, Password: o.redisPassword, Timeout: min(o.Timeout, 2*time.Second)}}
	if o.baselineRequests > 0 {
		c.Requests = o.baselineRequests
	}
	return c
}

// run is the whole lab; main only wires the process into it. It reads the
// environment through getenv alone.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	opts, err := parseOptions(args, getenv, stderr)
	if err != nil {
		return err
	}
	opts.ProgressTTY = report.IsTerminal(stderr)
	return runLab(ctx, opts, stdout, stderr)
}
