// Command loadtest is the seckill lab: it fires a flash sale at one or more
// instances under every evolution stage, then asks the audit (and, when
// SECKILL_MYSQL_DSN is set, MySQL itself) whether anything was oversold.
//
// The load comes from the vegeta library; this package only decides what
// each buyer sends, how to read the answers, and what the verdict is. The
// verdicts are the point: the lab exits non-zero when a stage that should be
// safe oversells or loses stock, or when a stage expected to oversell did
// not, so a workshop and CI can both rely on it.
//
//	go run ./loadtest                                  # all stages, three demo instances
//	go run ./loadtest --stages unlocked,db-atomic --targets http://127.0.0.1:8081
package main

import (
	"github.com/seckill-lab/seckill/loadtest/report"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/inventory"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopProfile := profileCPU(os.Getenv("SECKILL_LAB_CPUPROFILE"))
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stopProfile()
	switch {
	case err == nil:
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// profileCPU writes a CPU profile of the lab itself to path, when set,
// until the returned function is called: the lab's own share is part of
// the CPU per answer it reports (package cpu), and this shows where it goes.
func profileCPU(path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest: SECKILL_LAB_CPUPROFILE:", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest: SECKILL_LAB_CPUPROFILE:", err)
		}
	}
}

// errUsage marks a bad command line.
var errUsage = errors.New("usage")

// errVerdict is returned when at least one stage failed its verdict.
var errVerdict = errors.New("verdict failed")

// allStages lists the evolution stages in the order the workshop teaches them.
var allStages = inventory.Stages

// defaultTargets are the three instances `seckill demo` starts.
const defaultTargets = "http://127.0.0.1:8081,http://127.0.0.1:8082,http://127.0.0.1:8083"

// options is the parsed command line.
type options struct {
	targets []string
	stages  []string
	// allStages is set when --stages was all: a scenario about the sale
	// itself then runs on the safe stages only (scenario.stagesOf).
	allStages bool
	scenarios []scenario
	shape     string
	buyers    int
	stock     int
	rate      int
	duration  time.Duration
	workers   int
	// sweep lists the buyers in flight of each round of a sweep, in
	// ascending order; nil runs one round at workers.
	sweep []int
	// baselines measures the ceilings of baselines.go at every level,
	// baselineRequests requests each over HTTP (0: as many as buyers).
	baselines        bool
	baselineRequests int
	// repeat runs the whole lab this many times over (repeat.go); round
	// is the round a row belongs to, 1-based, and 0 when there is one.
	repeat  int
	round   int
	timeout time.Duration
	// maxDuration caps one burst: a stage too slow to serve the crowd in
	// time is stopped there, and its row says how much was sent.
	maxDuration time.Duration
	// confirmWait bounds how long the lab waits, after a burst under a
	// stage that queues its orders (redis-stream), for every accepted
	// order to be written.
	confirmWait time.Duration
	adminToken  string
	reportDir   string
	product     int64
	coupon      int64
	mysqlDSN    string
	// cpuRedis are the Redis servers whose CPU (INFO CPU) the lab reads
	// around each attack (package cpu), with redisPassword.
	cpuRedis      []string
	redisPassword string
	// soldOutStage is the stage of the sold-out baselines.
	soldOutStage string
	noColor      bool // NO_COLOR is set
	// progressTTY redraws the progress line in place; set when stderr is a
	// terminal, so a log file gets whole lines instead of \r runs.
	progressTTY bool
	// t0Buyers is the T-0 crowd, each buyer with a connection of its own,
	// and t0Lead how far ahead of the reference clock's now the lab sets
	// the opening (t0.go).
	t0Buyers int
	t0Lead   time.Duration
	// pace is the time between two paced arrivals, and pacedBuyers the
	// most arrivals the paced scenario sends (paced.go).
	pace        time.Duration
	pacedBuyers int
	// firstComeTargets are the paced scenario's targets per stage:
	// firstComeTargets of fairness.go, changed by --first-come-target
	// (firstComeNamed are the stages it named), and redis-lock's set
	// when the fleet's redis-lock is fair (fairLockTarget).
	firstComeTargets map[string]float64
	firstComeNamed   map[string]bool
	// scalperPeople is the scalper scenarios' crowd (scalper.go); their
	// limited row sets a per-address limit of scalperLimitBurst buys, then
	// one per scalperLimitInterval, and fails when the scalpers' gain is
	// above scalperTarget.
	scalperPeople        int
	scalperLimitInterval time.Duration
	scalperLimitBurst    int
	scalperTarget        float64
	scalperTargetVerdict bool
	// scalperDraw is the opening draw the limited row sets beside the
	// limit (0: none).
	scalperDraw time.Duration
	// expectOversell names the stages expected to oversell; nil means
	// "decide per stage": unlocked always, local-mutex when more than one
	// instance answered.
	expectOversell map[string]bool
}

// run is the whole lab; main only wires the process into it. It reads the
// environment through getenv alone.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	opts, err := parseOptions(args, getenv, stderr)
	if err != nil {
		return err
	}
	opts.progressTTY = report.IsTerminal(stderr)
	return runLab(ctx, opts, stdout, stderr)
}

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	targets := fs.String("targets", defaultTargets, "comma-separated instance base URLs; requests are spread round-robin")
	stages := fs.String("stages", "all", "comma-separated stages to run, or all: "+strings.Join(allStages, ", "))
	scenarios := fs.String("scenarios", strings.Join(scenarioNames(), ","), "comma-separated scenarios: "+strings.Join(scenarioNames(), ", ")+"; t0 and paced run on the stages safe in a fleet unless --stages names others")
	shape := fs.String("shape", "burst", "load shape: burst (all buyers at once through --workers) or constant (--rate for --duration)")
	buyers := fs.Int("buyers", 2000, "buyers per stage in a burst (the retry storm sends each buyer's request 3 times)")
	stock := fs.Int("stock", 100, "stock the item is reset to before each stage")
	rate := fs.Int("rate", 500, "requests per second of the constant shape")
	duration := fs.Duration("duration", 5*time.Second, "length of a constant attack")
	workers := fs.Int("workers", defaultWorkers, "buyers in flight at once in a burst, each with all its requests (and the most a constant attack may have in flight)")
	repeat := fs.Int("repeat", 1, "run the whole lab this many times over, round after round (baselines, then every attack), and report each attack's median run; an attack passes only if every run of it passed")
	sweep := fs.String("sweep", "", "comma-separated buyers in flight, e.g. 16,64,256,1024: runs every selected stage and scenario at each (instead of --workers) and adds a scaling table and charts")
	baselines := fs.Bool("baselines", false, "also measure, at each level of buyers in flight, GET /healthz and GET /api/v1/admin/redis-ping (one Redis round trip) on the targets and db-atomic's transaction straight on MySQL (needs SECKILL_MYSQL_DSN), and report stages as ratios of them")
	timeout := fs.Duration("timeout", 10*time.Second, "per-request timeout; a request past it counts as a timeout")
	maxDuration := fs.Duration("max-duration", 7*time.Second, "longest a burst may keep sending; a slower stage is stopped there and its row says how many requests went out; 7s keeps the 24 bursts of make lab, with its T-0, paced and scalper rows, within 3 minutes")
	confirmWait := fs.Duration("confirm-timeout", time.Minute, "after a burst under a stage that queues its orders (redis-stream), how long to wait for every accepted order to be confirmed or failed")
	token := fs.String("admin-token", getenv("SECKILL_ADMIN_TOKEN"), "admin bearer token of the targets (default $SECKILL_ADMIN_TOKEN, else the demo's token file)")
	tokenFile := fs.String("admin-token-file", demoTokenFile(getenv),
		"file holding the admin token, read when neither --admin-token nor $SECKILL_ADMIN_TOKEN is set; `seckill demo` writes it next to its database")
	reports := fs.String("report-dir", orDefault(getenv("SECKILL_LAB_REPORTS"), "loadtest/reports"),
		"folder that receives one report folder per run, and a latest link (default $SECKILL_LAB_REPORTS or loadtest/reports)")
	expect := fs.String("expect-oversell", "auto", "comma-separated stages that must oversell; auto means unlocked, and local-mutex when more than one instance answers")
	baselineRequests := fs.Int("baseline-requests", 0, "requests of each HTTP baseline (/healthz, redis-ping, the sold-out buys); default as many as --buyers. More make the CPU per answer of a baseline steadier: an instance's CPU counter ticks in 10 ms")
	cpuRedis := fs.String("cpu-redis", "", "comma-separated Redis servers (host:port) the instances use, whose CPU (INFO CPU) the lab adds to the instances' around each attack, and where it removes the keys the fleet made for raw-hot-row's scratch product; password from $SECKILL_REDIS_PASSWORD. An embedded Redis counts in its instance's process")
	soldOut := fs.String("sold-out-stage", inventory.StageRedisAtomic, "stage of the sold-out baselines of --baselines (buys of a product already sold out, with and without an Idempotency-Key)")
	t0Buyers := fs.Int("t0-buyers", 500, "buyers of the t0 scenario, each with a connection of its own, all released at the opening")
	t0Lead := fs.Duration("t0-lead", 3*time.Second, "how far ahead of the reference clock the t0 scenario sets the opening; the reset and every early buyer's refusal must fit in it")
	pace := fs.Duration("pace", 5*time.Millisecond, "time between two arrivals of the paced scenario; 5ms is slow enough that the lab's own jitter rarely spans more than a few places on two busy cores (see the fairness table's wins past jitter)")
	pacedBuyers := fs.Int("paced-buyers", 2000, "the most arrivals the paced scenario sends; it stops once the stock is sold")
	firstComeTarget := fs.String("first-come-target", "", "comma-separated stage=score (or stage=none) changing the paced scenario's first-come targets, e.g. redis-lock=0.95 on a fleet whose redis-lock is fair; default "+describeTargets(firstComeTargets))
	scalperPeople := fs.Int("scalper-people", 400, "the people of the scalper scenarios: 10% scalpers with 10 accounts each behind one address, firing every 50 ms from T-0, the others one request each in the first second")
	scalperInterval := fs.Duration("scalper-limit-interval", 30*time.Second, "the per-address rate limit of the scalper-limited scenario: one buy per this interval after the burst")
	scalperBurst := fs.Int("scalper-limit-burst", 1, "the per-address rate limit of the scalper-limited scenario: buys one address may send at once")
	scalperTarget := fs.Float64("scalper-target", 1.5, "the most the scalpers should win, as a multiple of their share of the people, with the per-address limit on (scalper-limited); reported as met or not")
	scalperTargetVerdict := fs.Bool("scalper-target-verdict", true, "fail the scalper-limited row when the scalpers surely won more than --scalper-target lets them (a one-sided binomial test at 1% over the units won: one draw of 100 units varies); false reports the target only, as a fleet without --scalper-draw needs: a rate limit caps how many requests a person sends, not how early, and scalpers firing at T-0 win one unit each before the ordinary buyers arrive")
	scalperDraw := fs.Duration("scalper-draw", 1500*time.Millisecond, "the opening draw the scalper-limited scenario sets beside the limit (opening_draw_ms of PUT /api/v1/admin/rate-limit): the sale opens at T-0, and buyers who come in its first --scalper-draw are let in at random; longer than the ordinary buyers' first second, so that those whose request a busy machine delays still draw; 0 runs the limit alone")
	product := fs.Int64("product", 1, "product id the buy and retry-storm scenarios sell")
	coupon := fs.Int64("coupon", 1, "coupon batch id the grab scenario hands out")
	if err := fs.Parse(args); err != nil {
		return options{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}

	o := options{
		shape:       *shape,
		buyers:      *buyers,
		stock:       *stock,
		rate:        *rate,
		duration:    *duration,
		workers:     *workers,
		repeat:      *repeat,
		timeout:     *timeout,
		maxDuration: *maxDuration,
		confirmWait: *confirmWait,
		adminToken:  *token,
		reportDir:   *reports,
		product:     *product,
		coupon:      *coupon,
		mysqlDSN:    getenv("SECKILL_MYSQL_DSN"),
		baselines:   *baselines,

		baselineRequests: *baselineRequests,
		noColor:          getenv("NO_COLOR") != "",

		cpuRedis:      config.SplitList(*cpuRedis),
		redisPassword: getenv("SECKILL_REDIS_PASSWORD"),
		soldOutStage:  *soldOut,

		t0Buyers:    *t0Buyers,
		t0Lead:      *t0Lead,
		pace:        *pace,
		pacedBuyers: *pacedBuyers,

		scalperPeople:        *scalperPeople,
		scalperLimitInterval: *scalperInterval,
		scalperLimitBurst:    *scalperBurst,
		scalperTarget:        *scalperTarget,
		scalperTargetVerdict: *scalperTargetVerdict,
		scalperDraw:          *scalperDraw,
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	for _, t := range config.SplitList(*targets) {
		u, err := normalizeTarget(t)
		if err != nil {
			bad("--targets: %v", err)
			continue
		}
		o.targets = append(o.targets, u)
	}
	if len(o.targets) == 0 {
		bad("--targets lists no URL")
	}

	if s := config.SplitList(*stages); len(s) == 1 && s[0] == "all" {
		o.stages, o.allStages = allStages, true
	} else {
		for _, name := range s {
			if !slices.Contains(allStages, name) {
				bad("--stages: unknown stage %q (want %s)", name, strings.Join(allStages, ", "))
				continue
			}
			if !slices.Contains(o.stages, name) {
				o.stages = append(o.stages, name)
			}
		}
		if len(o.stages) == 0 {
			bad("--stages lists no stage")
		}
	}

	for _, name := range config.SplitList(*scenarios) {
		sc, ok := lookupScenario(name)
		if !ok {
			bad("--scenarios: unknown scenario %q (want %s)", name, strings.Join(scenarioNames(), ", "))
			continue
		}
		o.scenarios = append(o.scenarios, sc)
	}
	if len(o.scenarios) == 0 {
		bad("--scenarios lists no scenario")
	}

	if e := config.SplitList(*expect); !(len(e) == 1 && e[0] == "auto") {
		o.expectOversell = map[string]bool{}
		for _, name := range e {
			if name == "none" {
				continue
			}
			if !slices.Contains(allStages, name) {
				bad("--expect-oversell: unknown stage %q", name)
			}
			o.expectOversell[name] = true
		}
	}

	for _, f := range config.SplitList(*sweep) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			bad("--sweep: %q is not a positive number of buyers in flight", f)
			continue
		}
		if !slices.Contains(o.sweep, n) {
			o.sweep = append(o.sweep, n)
		}
	}
	slices.Sort(o.sweep)
	if o.baselineRequests < 0 {
		bad("--baseline-requests must not be negative")
	}
	if !slices.Contains(allStages, o.soldOutStage) {
		bad("--sold-out-stage: unknown stage %q (want %s)", o.soldOutStage, strings.Join(allStages, ", "))
	}
	for _, addr := range o.cpuRedis {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("--cpu-redis: %q is not host:port", addr)
		}
	}
	if o.repeat < 1 {
		bad("--repeat must be at least 1")
	}
	if len(o.sweep) > 0 && o.shape != "burst" {
		bad("--sweep needs --shape burst: a constant attack's rate, not its workers, sets the load")
	}

	switch o.shape {
	case "burst":
		if o.buyers < 1 {
			bad("--buyers must be at least 1")
		}
	case "constant":
		if o.rate < 1 {
			bad("--rate must be at least 1 per second")
		}
		if o.duration <= 0 {
			bad("--duration must be positive")
		}
	default:
		bad("--shape must be burst or constant, not %q", o.shape)
	}
	if o.stock < 0 {
		bad("--stock must not be negative")
	}
	if o.t0Buyers < 1 || o.pacedBuyers < 1 {
		bad("--t0-buyers and --paced-buyers must be at least 1")
	}
	if o.scalperPeople < 10 {
		bad("--scalper-people must be at least 10 (a tenth of them are scalpers)")
	}
	if o.scalperDraw < 0 || o.scalperDraw > 10*time.Second {
		bad("--scalper-draw must be 0 to 10s")
	}
	if o.scalperLimitInterval < time.Millisecond || o.scalperLimitInterval > time.Hour || o.scalperLimitBurst < 1 {
		bad("--scalper-limit-interval must be 1ms to 1h and --scalper-limit-burst at least 1")
	}
	if !(o.scalperTarget > 0) {
		bad("--scalper-target must be above 0")
	}
	if o.t0Lead <= 0 || o.pace <= 0 {
		bad("--t0-lead and --pace must be positive")
	}
	o.firstComeTargets, o.firstComeNamed = maps.Clone(firstComeTargets), map[string]bool{}
	for _, kv := range config.SplitList(*firstComeTarget) {
		stage, v, ok := strings.Cut(kv, "=")
		if !ok || !slices.Contains(allStages, stage) {
			bad("--first-come-target: %q is not stage=score with a known stage", kv)
			continue
		}
		o.firstComeNamed[stage] = true
		if v == "none" {
			delete(o.firstComeTargets, stage)
			continue
		}
		score, err := strconv.ParseFloat(v, 64)
		if err != nil || score <= 0 || score > 1 {
			bad("--first-come-target: %q: the score must be above 0 and at most 1, or none", kv)
			continue
		}
		o.firstComeTargets[stage] = score
	}
	if o.workers < 1 {
		bad("--workers must be at least 1")
	}
	if o.timeout <= 0 {
		bad("--timeout must be positive")
	}
	if o.maxDuration <= 0 {
		bad("--max-duration must be positive")
	}
	if o.product < 1 || o.coupon < 1 {
		bad("--product and --coupon must be positive ids")
	}
	if o.adminToken == "" {
		tok, err := readTokenFile(*tokenFile)
		switch {
		case err == nil:
			o.adminToken = tok
		case errors.Is(err, os.ErrNotExist):
			bad("no admin token: pass --admin-token or set SECKILL_ADMIN_TOKEN to the token the targets were started with (the lab resets stock and picks stages through it); no demo token file at %s either", *tokenFile)
		default:
			bad("no admin token: %v", err)
		}
	}
	if len(errs) > 0 {
		return options{}, fmt.Errorf("%w: %w", errUsage, errors.Join(errs...))
	}
	return o, nil
}

// defaultWorkers is the crowd in flight by default: hundreds of buyers at
// once, as a flash sale brings them, yet few enough that the default run
// of every stage and scenario stays within three minutes on two cores.
const defaultWorkers = 256

// demoTokenFile is where `seckill demo` leaves its admin token: next to
// its database file, .demo/admin-token by default.
func demoTokenFile(getenv func(string) string) string {
	return filepath.Join(filepath.Dir(orDefault(getenv("SECKILL_DEMO_DB"), ".demo/seckill.db")), "admin-token")
}

// readTokenFile reads an admin token from path; surrounding white space is
// not part of it.
func readTokenFile(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token file: %w", err)
	}
	tok := strings.TrimSpace(string(raw))
	if tok == "" {
		return "", fmt.Errorf("admin token file %s is empty", path)
	}
	return tok, nil
}

// normalizeTarget accepts a base URL or a bare host:port.
func normalizeTarget(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("%q is not an http(s) base URL", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
