package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/scenario"
)

// The command line is declared in tables, one per package whose config it
// fills: the attacks' (scenario.Config) and the lab's own (options). A
// flag whose text needs parsing (a list, a URL) lands in raw first; the
// steps of checks.go turn it into its field and say what is wrong with
// it, in order.

// flagDef declares one flag on a set.
type flagDef func(fs *flag.FlagSet)

func stringFlag(p *string, name, def, usage string) flagDef {
	return func(fs *flag.FlagSet) { fs.StringVar(p, name, def, usage) }
}

func intFlag(p *int, name string, def int, usage string) flagDef {
	return func(fs *flag.FlagSet) { fs.IntVar(p, name, def, usage) }
}

func int64Flag(p *int64, name string, def int64, usage string) flagDef {
	return func(fs *flag.FlagSet) { fs.Int64Var(p, name, def, usage) }
}

func durationFlag(p *time.Duration, name string, def time.Duration, usage string) flagDef {
	return func(fs *flag.FlagSet) { fs.DurationVar(p, name, def, usage) }
}

func floatFlag(p *float64, name string, def float64, usage string) flagDef {
	return func(fs *flag.FlagSet) { fs.Float64Var(p, name, def, usage) }
}

func boolFlag(p *bool, name string, def bool, usage string) flagDef {
	return func(fs *flag.FlagSet) { fs.BoolVar(p, name, def, usage) }
}

// rawFlags are the flags parsed after the flag set: lists, URLs, the
// token file.
type rawFlags struct {
	targets, stages, scenarios, expect, sweep, cpuRedis, firstCome, tokenFile string
}

// attackFlags fill the attacks' config.
func attackFlags(c *scenario.Config, raw *rawFlags) []flagDef {
	return []flagDef{
		stringFlag(&raw.stages, "stages", "all", "comma-separated stages to run, or all: "+strings.Join(allStages, ", ")),
		stringFlag(&c.Shape, "shape", "burst", "load shape: burst (all buyers at once through --workers) or constant (--rate for --duration)"),
		intFlag(&c.Buyers, "buyers", 2000, "buyers per stage in a burst (the retry storm sends each buyer's request 3 times)"),
		intFlag(&c.Stock, "stock", 100, "stock the item is reset to before each stage"),
		intFlag(&c.Rate, "rate", 500, "requests per second of the constant shape"),
		durationFlag(&c.Duration, "duration", 5*time.Second, "length of a constant attack"),
		intFlag(&c.Workers, "workers", defaultWorkers, "buyers in flight at once in a burst, each with all its requests (and the most a constant attack may have in flight)"),
		durationFlag(&c.Timeout, "timeout", 10*time.Second, "per-request timeout; a request past it counts as a timeout"),
		durationFlag(&c.MaxDuration, "max-duration", 7*time.Second, "longest a burst may keep sending; a slower stage is stopped there and its row says how many requests went out; 7s keeps the 24 bursts of make lab, with its T-0, paced and scalper rows, within 3 minutes"),
		intFlag(&c.T0Buyers, "t0-buyers", 500, "buyers of the t0 scenario, each with a connection of its own, all released at the opening"),
		durationFlag(&c.T0Lead, "t0-lead", 3*time.Second, "how far ahead of the reference clock the t0 scenario sets the opening; the reset and every early buyer's refusal must fit in it"),
		durationFlag(&c.Pace, "pace", 5*time.Millisecond, "time between two arrivals of the paced scenario; 5ms is slow enough that the lab's own jitter rarely spans more than a few places on two busy cores (see the fairness table's wins past jitter)"),
		intFlag(&c.PacedBuyers, "paced-buyers", 2000, "the most arrivals the paced scenario sends; it stops once the stock is sold"),
		stringFlag(&raw.firstCome, "first-come-target", "", "comma-separated stage=score (or stage=none) changing the paced scenario's first-come targets, e.g. redis-lock=0.95 on a fleet whose redis-lock is fair; default "+scenario.DescribeTargets(scenario.FirstComeTargets)),
		intFlag(&c.ScalperPeople, "scalper-people", 400, "the people of the scalper scenarios: 10% scalpers with 10 accounts each behind one address, firing every 50 ms from T-0, the others one request each in the first second"),
		durationFlag(&c.ScalperLimitInterval, "scalper-limit-interval", 30*time.Second, "the per-address rate limit of the scalper-limited scenario: one buy per this interval after the burst"),
		intFlag(&c.ScalperLimitBurst, "scalper-limit-burst", 1, "the per-address rate limit of the scalper-limited scenario: buys one address may send at once"),
		floatFlag(&c.ScalperTarget, "scalper-target", 1.5, "the most the scalpers should win, as a multiple of their share of the people, with the per-address limit on (scalper-limited); reported as met or not"),
		boolFlag(&c.ScalperTargetVerdict, "scalper-target-verdict", true, "fail the scalper-limited row when the scalpers surely won more than --scalper-target lets them (a one-sided binomial test at 1% over the units won: one draw of 100 units varies); false reports the target only, as a fleet without --scalper-draw needs: a rate limit caps how many requests a person sends, not how early, and scalpers firing at T-0 win one unit each before the ordinary buyers arrive"),
		durationFlag(&c.ScalperDraw, "scalper-draw", 1500*time.Millisecond, "the opening draw the scalper-limited scenario sets beside the limit (opening_draw_ms of PUT /api/v1/admin/rate-limit): the sale opens at T-0, and buyers who come in its first --scalper-draw are let in at random; longer than the ordinary buyers' first second, so that those whose request a busy machine delays still draw; 0 runs the limit alone"),
		intFlag(&c.ClosedUsers, "closed-users", 64, "virtual users of the closed scenario, each buying as a new buyer, waiting for the answer and coming back after --closed-think"),
		durationFlag(&c.ClosedThink, "closed-think", 100*time.Millisecond, "think time of the closed scenario: how long after its answer a user comes back"),
		durationFlag(&c.ClosedDuration, "closed-duration", 3*time.Second, "how long the closed scenario's users keep coming back (0: --closed-iterations alone)"),
		intFlag(&c.ClosedIterations, "closed-iterations", 0, "buys of each closed user, at most (0: until --closed-duration)"),
		intFlag(&c.ManyProducts, "many-products", 200, "products of the many scenario, opened together by one session (ids from 900001)"),
		intFlag(&c.ManyStock, "many-stock", 50, "units of each product of the many scenario"),
		intFlag(&c.ManyBuyers, "many-buyers", 20000, "buyers of the many scenario, each choosing a product by a Zipf law; fired like buy through --workers, its cap --max-duration scaled by many-buyers/buyers"),
		int64Flag(&c.ManySeed, "many-seed", 1, "seed of the many scenario's Zipf draws: one seed, one crowd (the row reports it)"),
		boolFlag(&c.ManyAllStages, "many-all-stages", false, "run the many scenario on every stage of --stages all (unlocked and local-mutex are expected to oversell), not redis-atomic alone"),
		intFlag(&c.RoomPeople, "room-people", 300, "people of the waiting-room scenario, joining around the opening (a fifth of the ordinary ones one by one after its shuffle span)"),
		intFlag(&c.RoomScalpers, "room-scalpers", 5, "of --room-people, the scalpers of the waiting-room scenario: each with 10 accounts behind one address, polling every 200 ms"),
		intFlag(&c.RoomRate, "room-rate", 20, "passes per second of the waiting-room scenario's room: the most the buy endpoint's rate may be is 1.1× this"),
		intFlag(&c.RoomMaxInside, "room-max-inside", 10, "pass holders inside the waiting-room scenario's room at once"),
		durationFlag(&c.RoomShuffle, "room-shuffle", time.Second, "the waiting-room scenario's opening span: who joins before the opening or within it gets a place by a shuffle"),
		durationFlag(&c.RoomLead, "room-lead", time.Second, "how far ahead of the reference clock the waiting-room scenario sets its room's opening; the first early people join half of it before"),
		durationFlag(&c.RoomRateWindow, "room-rate-window", 5*time.Second, "the window the waiting-room scenario's judged buy rate is taken over (the most buys sent in one window): a buyer hears of its admission up to a poll (250 ms near the head) late, which bunches up to rate × 250 ms of buys into a window, under a tenth of a window of 2.5 s and more; the peak over 1 s is reported beside it"),
		durationFlag(&c.RoomGiveUp, "room-give-up", time.Minute, "how long after the opening's span a waiting-room account keeps asking; one still waiting then never heard sold-out"),
		boolFlag(&c.RoomAllStages, "room-all-stages", false, "run the waiting-room scenario on every safe stage of --stages all, not redis-atomic alone"),
		int64Flag(&c.Product, "product", 1, "product id the buy and retry-storm scenarios sell"),
		int64Flag(&c.Coupon, "coupon", 1, "coupon batch id the grab scenario hands out"),
	}
}

// labFlags fill the lab's own options: where to send, what to run, the
// baselines, the report.
func labFlags(o *options, raw *rawFlags, getenv func(string) string) []flagDef {
	return []flagDef{
		stringFlag(&raw.targets, "targets", defaultTargets, "comma-separated instance base URLs; requests are spread round-robin"),
		stringFlag(&raw.scenarios, "scenarios", strings.Join(scenario.DefaultNames(), ","), "comma-separated scenarios: "+strings.Join(scenario.Names(), ", ")+" (many only when named); t0 and paced run on the stages safe in a fleet unless --stages names others"),
		intFlag(&o.repeat, "repeat", 1, "run the whole lab this many times over, round after round (baselines, then every attack), and report each attack's median run; an attack passes only if every run of it passed"),
		stringFlag(&raw.sweep, "sweep", "", "comma-separated buyers in flight, e.g. 16,64,256,1024: runs every selected stage and scenario at each (instead of --workers) and adds a scaling table and charts"),
		boolFlag(&o.baselines, "baselines", false, "also measure, at each level of buyers in flight, GET /healthz and GET /api/v1/admin/redis-ping (one Redis round trip) on the targets and db-atomic's transaction straight on MySQL (needs SECKILL_MYSQL_DSN), and report stages as ratios of them"),
		durationFlag(&o.confirmWait, "confirm-timeout", time.Minute, "after a burst under a stage that queues its orders (redis-stream), how long to wait for every accepted order to be confirmed or failed"),
		stringFlag(&o.adminToken, "admin-token", getenv("SECKILL_ADMIN_TOKEN"), "admin bearer token of the targets (default $SECKILL_ADMIN_TOKEN, else the demo's token file)"),
		stringFlag(&raw.tokenFile, "admin-token-file", demoTokenFile(getenv),
			"file holding the admin token, read when neither --admin-token nor $SECKILL_ADMIN_TOKEN is set; `seckill demo` writes it next to its database"),
		stringFlag(&o.reportDir, "report-dir", orDefault(getenv("SECKILL_LAB_REPORTS"), "loadtest/reports"),
			"folder that receives one report folder per run, and a latest link (default $SECKILL_LAB_REPORTS or loadtest/reports)"),
		stringFlag(&raw.expect, "expect-oversell", "auto", "comma-separated stages that must oversell; auto means unlocked, and local-mutex when more than one instance answers"),
		intFlag(&o.baselineRequests, "baseline-requests", 0, "requests of each HTTP baseline (/healthz, redis-ping, the sold-out buys); default as many as --buyers. More make the CPU per answer of a baseline steadier: an instance's CPU counter ticks in 10 ms"),
		stringFlag(&raw.cpuRedis, "cpu-redis", "", "comma-separated Redis servers (host:port, or unix:/path for a Unix socket) the instances use, whose CPU (INFO CPU) the lab adds to the instances' around each attack, and where it removes the keys the fleet made for raw-hot-row's scratch product; password from $SECKILL_REDIS_PASSWORD. An embedded Redis counts in its instance's process"),
		stringFlag(&o.soldOutStage, "sold-out-stage", inventory.StageRedisAtomic, "stage of the sold-out baselines of --baselines (buys of a product already sold out, with and without an Idempotency-Key)"),
	}
}

// parseOptions parses the command line: the flag tables, then the steps
// that parse the raw flags and check every value, each error named.
func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var raw rawFlags
	for _, def := range append(attackFlags(&o.Config, &raw), labFlags(&o, &raw, getenv)...) {
		def(fs)
	}
	if err := fs.Parse(args); err != nil {
		return options{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	o.mysqlDSN, o.redisPassword, o.noColor = getenv("SECKILL_MYSQL_DSN"), getenv("SECKILL_REDIS_PASSWORD"), getenv("NO_COLOR") != ""
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, step := range steps {
		step(&o, raw, bad)
	}
	if len(errs) > 0 {
		return options{}, fmt.Errorf("%w: %w", errUsage, errors.Join(errs...))
	}
	return o, nil
}
