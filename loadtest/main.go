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
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
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
