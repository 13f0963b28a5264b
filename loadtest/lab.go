package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/baseline"
	"github.com/seckill-lab/seckill/loadtest/cpu"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/report"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/scenario"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// lab is one run of the lab: the fleet under test, MySQL when the lab
// counts in it, the CPU meter, and the report folder.
type lab struct {
	o      options
	f      *fleet.Fleet
	db     *sql.DB
	meter  *cpu.Meter
	dir    string
	runID  string
	stderr io.Writer
	// attacks counts the attacks so far, which makes each one's buyers
	// its own; plots holds each stage's latency plot.
	attacks int
	plots   map[string]*plot.Plot
}

// runLab runs every selected scenario under every selected stage, writes
// the report and prints the table. It returns errVerdict when a stage
// failed its verdict.
func runLab(ctx context.Context, o options, stdout, stderr io.Writer) (err error) {
	started := time.Now()
	l := &lab{o: o, stderr: stderr, runID: randomHex(4), plots: map[string]*plot.Plot{}}
	if l.f, err = fleet.Survey(ctx, o.targets, o.adminToken, o.Timeout); err != nil {
		return err
	}
	if scenario.FairLockTarget(&l.o.Config, l.f) {
		fmt.Fprintf(stderr, "lab: every target's redis-lock runs the fair lock (lock_fair in /api/v1/info): its first-come target is %.2f\n", l.o.FirstComeTargets[inventory.StageRedisLock])
	}
	if o.mysqlDSN != "" {
		if l.db, err = verdict.OpenMySQL(ctx, o.mysqlDSN); err != nil {
			return err
		}
		defer func() {
			if cerr := l.db.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("closing MySQL: %w", cerr))
			}
		}()
	}
	if l.dir, err = report.NewDir(o.reportDir, started); err != nil {
		return err
	}
	l.announce(ctx)
	rep := report.Report{StartedAt: started, Targets: o.targets, Settings: settingsOf(l.o), Scenes: scenes()}
	var rowRounds [][]results.Row
	var ceilingRounds [][]results.Ceiling
	for round := 1; round <= o.repeat; round++ {
		rows, ceilings, err := l.runRound(ctx, round)
		if err != nil {
			return err
		}
		rowRounds, ceilingRounds = append(rowRounds, rows), append(ceilingRounds, ceilings)
	}
	return l.finish(rep, rowRounds, ceilingRounds, stdout)
}

// announce says what the lab will run and how it reads the CPU, and
// builds the CPU meter.
func (l *lab) announce(ctx context.Context) {
	o := l.o
	planned := 0
	for _, sc := range o.scenarios {
		planned += len(sc.StagesOf(o.Config)) * max(1, len(o.sweep)) * o.repeat
	}
	fmt.Fprintf(l.stderr, "lab: %s against %s (%d instance(s)); %s\n",
		plural(planned, "attack"), strings.Join(o.targets, ", "), l.f.InstanceCount(), describeLoad(o))
	l.meter = newCPUMeter(ctx, l.f, o, cpu.LocalProcs())
	for _, src := range l.meter.Sources {
		switch {
		case src.Read == nil:
			fmt.Fprintf(l.stderr, "lab: %s CPU: %s\n", src.Name, src.Skip)
		case src.How != "":
			fmt.Fprintf(l.stderr, "lab: %s CPU: read from %s\n", src.Name, src.How)
		}
	}
}

// levels are the buyers in flight of each round of a sweep, or the one
// level of --workers.
func (o options) levels() []int {
	if len(o.sweep) == 0 {
		return []int{o.Workers}
	}
	return o.sweep
}

// runRound runs the baselines, then every row, once.
func (l *lab) runRound(ctx context.Context, round int) ([]results.Row, []results.Ceiling, error) {
	ro := l.o
	if l.o.repeat > 1 {
		ro.round = round
		fmt.Fprintf(l.stderr, "lab: round %d of %d\n", round, l.o.repeat)
	}
	var rows []results.Row
	var ceilings []results.Ceiling
	if ro.baselines {
		for _, workers := range ro.levels() {
			lo := ro
			lo.Workers = workers
			ceilings = append(ceilings, baseline.Measure(ctx, lo.baseline(), l.f, l.db, l.meter, workers, l.nextTag("b"), l.stderr)...)
		}
	}
	for _, sc := range ro.scenarios {
		for _, workers := range ro.levels() {
			lo := ro
			lo.Workers = workers
			for _, stage := range sc.StagesOf(ro.Config) {
				r, err := l.runRow(ctx, lo, sc, stage, l.nextTag("r"))
				if err != nil {
					if ctx.Err() != nil {
						return nil, nil, fmt.Errorf("interrupted: %w", err)
					}
					// One broken stage must not hide the others' verdicts.
					r.Verdict, r.Note, r.Broken = results.Fail, verdict.RuleLabError+": "+err.Error(), []string{verdict.RuleLabError}
				}
				rows = append(rows, r)
			}
		}
	}
	verdict.CompareWithBuy(rows) // the many rows' many-vs-buy rule reads the buy rows
	return rows, ceilings, nil
}

// nextTag is the next attack's tag, which makes its buyers its own.
func (l *lab) nextTag(kind string) string {
	tag := fmt.Sprintf("lab-%s-%s%d", l.runID, kind, l.attacks)
	l.attacks++
	return tag
}

// finish folds the rounds into the report, writes it and prints it.
func (l *lab) finish(rep report.Report, rowRounds [][]results.Row, ceilingRounds [][]results.Ceiling, stdout io.Writer) error {
	rep.Ceilings = report.MedianCeilings(ceilingRounds)
	rep.Rows = report.MedianRows(rowRounds, ceilingRounds)
	report.CompareCPU(rep.Rows, rowRounds, rep.Ceilings, ceilingRounds)
	rep.CPUTargets = report.CheckCPUTargets(rep, l.o.soldOutStage)
	rep.FinishedAt = time.Now()

	if err := report.WritePlots(l.dir, l.plots, rep.Rows); err != nil {
		return err
	}
	rep.Knees = report.FindKnees(rep)
	rep.Models = report.ModelSweep(rep)
	if err := report.WriteCharts(l.dir, &rep); err != nil {
		return err
	}
	if err := report.WriteReport(l.dir, rep); err != nil {
		return err
	}
	if err := report.PointLatest(l.o.reportDir, l.dir); err != nil {
		fmt.Fprintf(l.stderr, "lab: warning: %v\n", err)
	}
	report.PrintTables(stdout, rep, !l.o.noColor && report.IsTerminal(stdout))
	fmt.Fprintf(stdout, "\nreport: %s (%s)\n", l.dir, rep.FinishedAt.Sub(rep.StartedAt).Round(100*time.Millisecond))

	if failed := rep.Failed(); len(failed) > 0 {
		return fmt.Errorf("%w: %s", errVerdict, strings.Join(failed, ", "))
	}
	return nil
}

// runRow resets the item, attacks it under stage, and judges the audit.
func (l *lab) runRow(ctx context.Context, o options, sc scenario.Scenario, stage, tag string) (results.Row, error) {
	f := l.f
	r := results.Row{Scenario: sc.Name, Model: sc.Model, Shape: o.Shape, Stage: stage, Instances: f.InstanceCount(), Workers: o.Workers, Round: o.round}
	if miss := f.Missing(stage); len(miss) > 0 {
		r.Verdict, r.Note = results.Skipped, "skipped: not available on target"
		if len(miss) < len(o.targets) {
			r.Note += " " + strings.Join(miss, ", ")
		}
		return r, nil
	}
	id := sc.ItemID(o.Config)
	if err := sc.SetUp(ctx, o.Config, f, id); err != nil {
		return r, err
	}
	plan := scenario.Plan{Scenario: sc, Stage: stage, Targets: o.targets, Token: o.adminToken, ItemID: id, Tag: tag, Series: series(o, sc)}
	cpuBefore := l.meter.Read(ctx)
	res, err := sc.Crowd().Attack(ctx, o.Config, f, plan, l.plot(stage), l.stderr)
	r.T0, r.Paced, r.Scalper, r.Room = res.T0, res.Paced, res.Scalper, res.Room
	if err != nil {
		return r, err
	}
	var conf *fleet.Confirmation
	if inventory.Queues(stage) {
		// The orders the 202s accepted are written behind a queue: judge
		// the stage once they all are, or the wait is over.
		c, err := f.Confirm(ctx, sc.Item(id), res.AcceptedOrders(), o.confirmWait)
		if err != nil {
			return r, err
		}
		conf = &c
	}
	// After the queue drained, so a queued stage's order writes count.
	used := l.meter.Usage(cpuBefore, l.meter.Read(ctx))
	if err := l.fill(ctx, &r, o, sc, id, res, used, conf); err != nil {
		return r, err
	}
	r.Buyers = ceilDiv(r.Requests, max(1, sc.Copies))
	r.ExpectOversell = verdict.ExpectsOversell(o.expectOversell, stage, r.Instances, inFlight(o, r), sc.Buyers(o.Config), o.Stock)
	verdict.Judge(&r)
	return r, nil
}

// plot is stage's latency plot: it holds every attack on the stage, one
// series per scenario (and level of a sweep) and answer.
func (l *lab) plot(stage string) *plot.Plot {
	pl, ok := l.plots[stage]
	if !ok {
		pl = plot.New(plot.Title("seckill lab: "+stage), plot.Label(scenario.OutcomeLabeler), plot.Downsample(3000))
		l.plots[stage] = pl
	}
	return pl
}

// series names an attack in its stage's plot.
func series(o options, sc scenario.Scenario) string {
	s := sc.Name
	if len(o.sweep) > 0 {
		s = fmt.Sprintf("%s@%d", sc.Name, o.Workers)
	}
	if o.round > 0 {
		s += fmt.Sprintf(" run %d", o.round)
	}
	return s
}

// fill copies into r what the attack, the settled audit, the CPU meter,
// the confirmation of queued orders and MySQL say.
func (l *lab) fill(ctx context.Context, r *results.Row, o options, sc scenario.Scenario, id int64, res scenario.Result, used *cpu.Usage, conf *fleet.Confirmation) error {
	f := l.f
	if n := len(res.Instances()); n > 0 {
		r.Instances = n // what answered, which a load balancer in front can hide from /info
	}
	// With every request answered the server is done; after timeouts it may
	// still be working on requests the lab stopped waiting for.
	settle := time.Duration(0)
	if res.Unanswered() > 0 {
		settle = 2 * o.Timeout
	}
	a, err := f.SettledAudit(ctx, sc.Item(id), settle)
	if err != nil {
		return err
	}
	scenario.FillRow(r, res, a)
	r.SetCPU(used, res.Served())
	if conf != nil {
		scenario.FillConfirmation(r, *conf)
	}
	r.RSSMB = f.ResidentMiB(ctx)
	r.HDR = report.HDRFile(*r, len(o.sweep) > 0)
	if err := report.WriteHDR(filepath.Join(l.dir, r.HDR), res.Metrics()); err != nil {
		return err
	}
	if m := res.BuyerMetrics(); m != nil {
		r.BuyerHDR = report.BuyerHDRFile(*r, len(o.sweep) > 0)
		if err := report.WriteHDR(filepath.Join(l.dir, r.BuyerHDR), m); err != nil {
			return err
		}
	}
	if err := report.WriteHDRLogs(l.dir, r, len(o.sweep) > 0, res.Samples()); err != nil {
		return err
	}
	if l.db == nil {
		return nil
	}
	if r.Many != nil {
		r.MySQL, err = verdict.CountManyInMySQL(ctx, l.db, r.Many, f.InstanceNames(res.Instances()), res.WrittenOrders())
		return err
	}
	it := verdict.Item{Coupon: sc.Coupon, ID: id}
	if r.MySQL, err = verdict.CountInMySQL(ctx, l.db, it, f.InstanceNames(res.Instances()), res.WrittenOrders()); err != nil {
		return err
	}
	if r.T0 != nil {
		return verdict.ReadT0MySQL(ctx, l.db, r.T0, it)
	}
	return nil
}

// inFlight is how many buyers of the row could race: the T-0 crowd all at
// once, paced arrivals as many as were in flight together.
func inFlight(o options, r results.Row) int {
	switch {
	case r.T0 != nil:
		return o.T0Buyers
	case r.Paced != nil:
		return r.Paced.PeakInFlight
	case r.Scalper != nil:
		return scenario.Scenario{Kind: results.CrowdScalper}.Buyers(o.Config)
	case r.Model == results.ModelClosed:
		return o.ClosedUsers
	case r.Room != nil:
		return scenario.Scenario{Kind: results.CrowdRoom}.Buyers(o.Config)
	}
	return o.Workers
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func describeLoad(o options) string {
	if o.Shape == "burst" && len(o.sweep) > 0 {
		return fmt.Sprintf("bursts of %d buyers at %s in flight, stock %d", o.Buyers, report.JoinInts(o.sweep), o.Stock)
	}
	if o.Shape == "burst" {
		return fmt.Sprintf("burst of %d buyers, %d in flight, stock %d", o.Buyers, o.Workers, o.Stock)
	}
	return fmt.Sprintf("constant %d req/s for %s (at most %d workers), stock %d", o.Rate, o.Duration, o.Workers, o.Stock)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}
