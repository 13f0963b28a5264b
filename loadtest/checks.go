package main

import (
	"errors"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/loadtest/scenario"
)

// step parses or checks one part of the command line, and calls bad for
// each thing wrong with it.
type step func(o *options, raw rawFlags, bad func(format string, args ...any))

// steps run in this order; a usage error lists what they found in it.
var steps = []step{
	parseTargets,
	parseStages,
	parseScenarios,
	parseExpectOversell,
	parseSweep,
	parseCPURedis,
	checkCounts,
	checkShape,
	checkScalpers,
	checkMany,
	parseFirstComeTargets,
	checkLimits,
	readAdminToken,
}

func parseTargets(o *options, raw rawFlags, bad func(string, ...any)) {
	for _, t := range config.SplitList(raw.targets) {
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
}

func parseStages(o *options, raw rawFlags, bad func(string, ...any)) {
	if s := config.SplitList(raw.stages); len(s) == 1 && s[0] == "all" {
		o.Stages, o.AllStages = allStages, true
		return
	}
	for _, name := range config.SplitList(raw.stages) {
		if !slices.Contains(allStages, name) {
			bad("--stages: unknown stage %q (want %s)", name, strings.Join(allStages, ", "))
			continue
		}
		if !slices.Contains(o.Stages, name) {
			o.Stages = append(o.Stages, name)
		}
	}
	if len(o.Stages) == 0 {
		bad("--stages lists no stage")
	}
}

func parseScenarios(o *options, raw rawFlags, bad func(string, ...any)) {
	for _, name := range config.SplitList(raw.scenarios) {
		sc, ok := scenario.Lookup(name)
		if !ok {
			bad("--scenarios: unknown scenario %q (want %s)", name, strings.Join(scenario.Names(), ", "))
			continue
		}
		o.scenarios = append(o.scenarios, sc)
	}
	if len(o.scenarios) == 0 {
		bad("--scenarios lists no scenario")
	}
}

func parseExpectOversell(o *options, raw rawFlags, bad func(string, ...any)) {
	e := config.SplitList(raw.expect)
	if len(e) == 1 && e[0] == "auto" {
		return
	}
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

func parseSweep(o *options, raw rawFlags, bad func(string, ...any)) {
	for _, f := range config.SplitList(raw.sweep) {
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
}

func parseCPURedis(o *options, raw rawFlags, bad func(string, ...any)) {
	o.cpuRedis = config.SplitList(raw.cpuRedis)
	for _, addr := range o.cpuRedis {
		if network, a := config.RedisNetAddr(addr); network == "unix" {
			if !strings.HasPrefix(a, "/") {
				bad("--cpu-redis: %q: a Unix socket needs an absolute path, such as unix:/run/redis/redis.sock", addr)
			}
		} else if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("--cpu-redis: %q is not host:port or unix:/path", addr)
		}
	}
}

func checkCounts(o *options, _ rawFlags, bad func(string, ...any)) {
	if o.repeat < 1 {
		bad("--repeat must be at least 1")
	}
	if len(o.sweep) > 0 && o.Shape != "burst" {
		bad("--sweep needs --shape burst: a constant attack's rate, not its workers, sets the load")
	}
}

func checkShape(o *options, _ rawFlags, bad func(string, ...any)) {
	switch o.Shape {
	case "burst":
		if o.Buyers < 1 {
			bad("--buyers must be at least 1")
		}
	case "constant":
		if o.Rate < 1 {
			bad("--rate must be at least 1 per second")
		}
		if o.Duration <= 0 {
			bad("--duration must be positive")
		}
	default:
		bad("--shape must be burst or constant, not %q", o.Shape)
	}
	if o.Stock < 0 {
		bad("--stock must not be negative")
	}
	if o.T0Buyers < 1 || o.PacedBuyers < 1 {
		bad("--t0-buyers and --paced-buyers must be at least 1")
	}
	for _, why := range scenario.ClosedProblems(o.Config) {
		bad("%s", why)
	}
	for _, why := range scenario.RoomProblems(o.Config) {
		bad("%s", why)
	}
}

func checkScalpers(o *options, _ rawFlags, bad func(string, ...any)) {
	if o.ScalperPeople < 10 {
		bad("--scalper-people must be at least 10 (a tenth of them are scalpers)")
	}
	if o.ScalperDraw < 0 || o.ScalperDraw > 10*time.Second {
		bad("--scalper-draw must be 0 to 10s")
	}
	if o.ScalperLimitInterval < time.Millisecond || o.ScalperLimitInterval > time.Hour || o.ScalperLimitBurst < 1 {
		bad("--scalper-limit-interval must be 1ms to 1h and --scalper-limit-burst at least 1")
	}
	if !(o.ScalperTarget > 0) {
		bad("--scalper-target must be above 0")
	}
	if o.T0Lead <= 0 || o.Pace <= 0 {
		bad("--t0-lead and --pace must be positive")
	}
}

func parseFirstComeTargets(o *options, raw rawFlags, bad func(string, ...any)) {
	o.FirstComeTargets, o.FirstComeNamed = maps.Clone(scenario.FirstComeTargets), map[string]bool{}
	for _, kv := range config.SplitList(raw.firstCome) {
		stage, v, ok := strings.Cut(kv, "=")
		if !ok || !slices.Contains(allStages, stage) {
			bad("--first-come-target: %q is not stage=score with a known stage", kv)
			continue
		}
		o.FirstComeNamed[stage] = true
		if v == "none" {
			delete(o.FirstComeTargets, stage)
			continue
		}
		score, err := strconv.ParseFloat(v, 64)
		if err != nil || score <= 0 || score > 1 {
			bad("--first-come-target: %q: the score must be above 0 and at most 1, or none", kv)
			continue
		}
		o.FirstComeTargets[stage] = score
	}
}

func checkLimits(o *options, _ rawFlags, bad func(string, ...any)) {
	if o.Workers < 1 {
		bad("--workers must be at least 1")
	}
	if o.Timeout <= 0 {
		bad("--timeout must be positive")
	}
	if o.MaxDuration <= 0 {
		bad("--max-duration must be positive")
	}
	if o.Product < 1 || o.Coupon < 1 {
		bad("--product and --coupon must be positive ids")
	}
}

func readAdminToken(o *options, raw rawFlags, bad func(string, ...any)) {
	if o.adminToken != "" {
		return
	}
	tok, err := readTokenFile(raw.tokenFile)
	switch {
	case err == nil:
		o.adminToken = tok
	case errors.Is(err, os.ErrNotExist):
		bad("no admin token: pass --admin-token or set SECKILL_ADMIN_TOKEN to the token the targets were started with (the lab resets stock and picks stages through it); no demo token file at %s either", raw.tokenFile)
	default:
		bad("no admin token: %v", err)
	}
}

func checkMany(o *options, _ rawFlags, bad func(string, ...any)) {
	if err := scenario.CheckMany(o.Config); err != nil {
		bad("%v", err)
	}
}
