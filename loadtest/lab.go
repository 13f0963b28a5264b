package main

import (
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/report"

	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/cpu"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// runLab runs every selected scenario under every selected stage, writes
// the report and prints the table. It returns errVerdict when a stage
// failed its verdict.
func runLab(ctx context.Context, o options, stdout, stderr io.Writer) (err error) {
	started := time.Now()
	f, err := fleet.Survey(ctx, o.targets, o.adminToken, o.timeout)
	if err != nil {
		return err
	}
	if fairLockTarget(&o, f) {
		fmt.Fprintf(stderr, "lab: every target's redis-lock runs the fair lock (lock_fair in /api/v1/info): its first-come target is %.2f\n", o.firstComeTargets[inventory.StageRedisLock])
	}
	var db *sql.DB
	if o.mysqlDSN != "" {
		if db, err = verdict.OpenMySQL(ctx, o.mysqlDSN); err != nil {
			return err
		}
		defer func() {
			if cerr := db.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("closing MySQL: %w", cerr))
			}
		}()
	}
	dir, err := report.NewDir(o.reportDir, started)
	if err != nil {
		return err
	}
	runID := randomHex(4)

	planned := 0
	for _, sc := range o.scenarios {
		planned += len(sc.stagesOf(o)) * max(1, len(o.sweep)) * o.repeat
	}
	fmt.Fprintf(stderr, "lab: %s against %s (%d instance(s)); %s\n",
		plural(planned, "attack"), strings.Join(o.targets, ", "), f.InstanceCount(), describeLoad(o))

	meter := newCPUMeter(ctx, f, o, cpu.LocalProcs())
	for _, src := range meter.Sources {
		switch {
		case src.Read == nil:
			fmt.Fprintf(stderr, "lab: %s CPU: %s\n", src.Name, src.Skip)
		case src.How != "":
			fmt.Fprintf(stderr, "lab: %s CPU: read from %s\n", src.Name, src.How)
		}
	}

	rep := report.Report{StartedAt: started, Targets: o.targets, Settings: settingsOf(o), Scenes: scenes()}
	attacks := 0 // attacks so far, which makes each one's buyers its own
	plots := map[string]*plot.Plot{}
	levels := o.sweep
	if len(levels) == 0 {
		levels = []int{o.workers}
	}
	var rowRounds [][]results.Row
	var ceilingRounds [][]results.Ceiling
	for round := 1; round <= o.repeat; round++ {
		ro := o
		if o.repeat > 1 {
			ro.round = round
			fmt.Fprintf(stderr, "lab: round %d of %d\n", round, o.repeat)
		}
		var rows []results.Row
		var ceilings []results.Ceiling
		if o.baselines {
			for _, workers := range levels {
				lo := ro
				lo.workers = workers
				tag := fmt.Sprintf("lab-%s-b%d", runID, attacks)
				attacks++
				ceilings = append(ceilings, measureCeilings(ctx, lo, f, db, meter, workers, tag, stderr)...)
			}
		}
		for _, sc := range o.scenarios {
			for _, workers := range levels {
				lo := ro
				lo.workers = workers
				for _, stage := range sc.stagesOf(o) {
					tag := fmt.Sprintf("lab-%s-r%d", runID, attacks)
					attacks++
					r, err := runRow(ctx, lo, f, db, meter, dir, sc, stage, tag, plots, stderr)
					if err != nil {
						if ctx.Err() != nil {
							return fmt.Errorf("interrupted: %w", err)
						}
						// One broken stage must not hide the others' verdicts.
						r.Verdict, r.Note, r.Broken = results.Fail, verdict.RuleLabError+": "+err.Error(), []string{verdict.RuleLabError}
					}
					rows = append(rows, r)
				}
			}
		}
		rowRounds, ceilingRounds = append(rowRounds, rows), append(ceilingRounds, ceilings)
	}
	rep.Ceilings = report.MedianCeilings(ceilingRounds)
	rep.Rows = report.MedianRows(rowRounds, ceilingRounds)
	report.CompareCPU(rep.Rows, rowRounds, rep.Ceilings, ceilingRounds)
	rep.CPUTargets = report.CheckCPUTargets(rep, o.soldOutStage)
	rep.FinishedAt = time.Now()

	if err := report.WritePlots(dir, plots, rep.Rows); err != nil {
		return err
	}
	rep.Knees = report.FindKnees(rep)
	rep.Models = report.ModelSweep(rep)
	if err := report.WriteCharts(dir, &rep); err != nil {
		return err
	}
	if err := report.WriteReport(dir, rep); err != nil {
		return err
	}
	if err := report.PointLatest(o.reportDir, dir); err != nil {
		fmt.Fprintf(stderr, "lab: warning: %v\n", err)
	}
	report.PrintTables(stdout, rep, !o.noColor && report.IsTerminal(stdout))
	fmt.Fprintf(stdout, "\nreport: %s (%s)\n", dir, rep.FinishedAt.Sub(rep.StartedAt).Round(100*time.Millisecond))

	if failed := rep.Failed(); len(failed) > 0 {
		return fmt.Errorf("%w: %s", errVerdict, strings.Join(failed, ", "))
	}
	return nil
}

// runRow resets the item, attacks it under stage, and judges the audit.
func runRow(ctx context.Context, o options, f *fleet.Fleet, db *sql.DB, meter *cpu.Meter, dir string, sc scenario, stage, tag string, plots map[string]*plot.Plot, stderr io.Writer) (results.Row, error) {
	r := results.Row{Scenario: sc.name, Shape: o.shape, Stage: stage, Instances: f.InstanceCount(), Workers: o.workers, Round: o.round}
	if miss := f.Missing(stage); len(miss) > 0 {
		r.Verdict, r.Note = results.Skipped, "skipped: not available on target"
		if len(miss) < len(o.targets) {
			r.Note += " " + strings.Join(miss, ", ")
		}
		return r, nil
	}
	id := sc.itemID(o)
	if sc.crowd != results.CrowdT0 { // the T-0 crowd resets with the sale's opening
		if err := f.Reset(ctx, sc.item(id), o.stock); err != nil {
			return r, err
		}
	}
	pl, ok := plots[stage]
	if !ok {
		pl = plot.New(plot.Title("seckill lab: "+stage), plot.Label(outcomeLabeler), plot.Downsample(3000))
		plots[stage] = pl
	}
	// The plot of a stage holds every attack on it, one series per
	// scenario (and level of a sweep) and answer.
	series := sc.name
	if len(o.sweep) > 0 {
		series = fmt.Sprintf("%s@%d", sc.name, o.workers)
	}
	if o.round > 0 {
		series += fmt.Sprintf(" run %d", o.round)
	}
	plan := attackPlan{scenario: sc, stage: stage, targets: o.targets, token: o.adminToken, itemID: id, tag: tag, series: series}
	cpuBefore := meter.Read(ctx)
	var res attackResult
	var err error
	switch sc.crowd {
	case results.CrowdT0:
		var fig results.T0
		res, fig, err = t0Leads(ctx, o, f, plan, o.stock, pl, stderr)
		r.T0 = &fig
	case results.CrowdPaced:
		var fig results.Paced
		res, fig, err = pacedAttack(ctx, o, plan, o.stock, pl, stderr)
		r.Paced = &fig
	case results.CrowdScalper:
		var fig results.Scalper
		res, fig, err = scalperAttack(ctx, o, f, plan, sc.limited, pl, stderr)
		r.Scalper = &fig
	default:
		res, err = attack(ctx, o, plan, pl, stderr)
	}
	if err != nil {
		return r, err
	}
	var conf *fleet.Confirmation
	if inventory.Queues(stage) {
		// The orders the 202s accepted are written behind a queue: judge
		// the stage once they all are, or the wait is over.
		c, err := f.Confirm(ctx, sc.item(id), res.tally.acceptedOrders(), o.confirmWait)
		if err != nil {
			return r, err
		}
		conf = &c
	}
	// After the queue drained, so a queued stage's order writes count.
	cpu := meter.Usage(cpuBefore, meter.Read(ctx))
	if n := len(res.tally.instances); n > 0 {
		r.Instances = n // what answered, which a load balancer in front can hide from /info
	}
	// With every request answered the server is done; after timeouts it may
	// still be working on requests the lab stopped waiting for.
	settle := time.Duration(0)
	if res.tally.outcomes[outTimeout]+res.tally.outcomes[outNetError] > 0 {
		settle = 2 * o.timeout
	}
	a, err := f.SettledAudit(ctx, sc.item(id), settle)
	if err != nil {
		return r, err
	}
	fillRow(&r, res, a)
	r.SetCPU(cpu, res.tally.served())
	if conf != nil {
		fillConfirmation(&r, *conf)
	}
	r.RSSMB = f.ResidentMiB(ctx)
	r.HDR = report.HDRFile(r, len(o.sweep) > 0)
	if err := writeHDR(filepath.Join(dir, r.HDR), &res.metrics); err != nil {
		return r, err
	}
	if db != nil {
		if r.MySQL, err = verdict.CountInMySQL(ctx, db, verdict.Item{Coupon: sc.coupon, ID: id}, f.InstanceNames(res.tally.instances), res.tally.writtenOrders()); err != nil {
			return r, err
		}
		if r.T0 != nil {
			if err := verdict.ReadT0MySQL(ctx, db, r.T0, verdict.Item{Coupon: sc.coupon, ID: id}); err != nil {
				return r, err
			}
		}
	}
	r.Buyers = ceilDiv(r.Requests, max(1, sc.copies))
	r.ExpectOversell = verdict.ExpectsOversell(o.expectOversell, stage, r.Instances, inFlight(o, r), crowd(o, sc), o.stock)
	verdict.Judge(&r)
	return r, nil
}

// writeHDR writes an attack's latency distribution in the format of
// `vegeta report -type=hdrplot`, which the HdrHistogram plotter reads.
func writeHDR(path string, m *vegeta.Metrics) error {
	var buf bytes.Buffer
	if err := vegeta.NewHDRHistogramPlotReporter(m).Report(&buf); err != nil {
		return fmt.Errorf("HDR histogram: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("HDR histogram: %w", err)
	}
	return nil
}

// crowd is the number of distinct buyers an attack means to bring.
func crowd(o options, sc scenario) int {
	switch sc.crowd {
	case results.CrowdT0:
		return o.t0Buyers
	case results.CrowdPaced:
		return o.pacedBuyers
	case results.CrowdScalper:
		return newScalperCrowd(o.scalperPeople).normals + newScalperCrowd(o.scalperPeople).scalpers*scalperAccounts
	}
	if o.shape == "burst" {
		return o.buyers
	}
	return int(float64(o.rate)*o.duration.Seconds()) / max(1, sc.copies)
}

// inFlight is how many buyers of the row could race: the T-0 crowd all at
// once, paced arrivals as many as were in flight together.
func inFlight(o options, r results.Row) int {
	switch {
	case r.T0 != nil:
		return o.t0Buyers
	case r.Paced != nil:
		return r.Paced.PeakInFlight
	case r.Scalper != nil:
		return crowd(o, scenario{crowd: results.CrowdScalper})
	}
	return o.workers
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func describeLoad(o options) string {
	if o.shape == "burst" && len(o.sweep) > 0 {
		return fmt.Sprintf("bursts of %d buyers at %s in flight, stock %d", o.buyers, report.JoinInts(o.sweep), o.stock)
	}
	if o.shape == "burst" {
		return fmt.Sprintf("burst of %d buyers, %d in flight, stock %d", o.buyers, o.workers, o.stock)
	}
	return fmt.Sprintf("constant %d req/s for %s (at most %d workers), stock %d", o.rate, o.duration, o.workers, o.stock)
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
