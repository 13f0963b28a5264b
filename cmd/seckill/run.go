package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/seckill-lab/seckill/internal/config"
)

const usage = `usage: seckill <command> [flags]

commands:
  demo      three instances on embedded Redis and SQLite; needs nothing installed
  story     one burst per stage against the demo (started if none runs): who oversells
  serve     one instance on MySQL (SECKILL_MYSQL_DSN) and Redis (SECKILL_REDIS_ADDR)
  migrate   apply sql/mysql to SECKILL_MYSQL_DSN and exit
  catalogue load a test catalogue of -items N items in bulk (MySQL, or the demo's SQLite)
  probe URL exit 0 when URL answers 2xx (container healthchecks)
  token     print the admin token of -file, making one if there is none (compose)
  version   the module version and the commit this binary was built from
  help      this text

'seckill <command> -h' describes one command.

settings (environment variables):
`

// errUsage marks a command line that could not be understood.
var errUsage = errors.New("usage")

// run is the whole program, callable from tests: it returns when ctx is
// cancelled (after a graceful shutdown) or when a command fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage+config.Help())
		return fmt.Errorf("%w: no command given", errUsage)
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "demo":
		err = runDemo(ctx, rest, getenv, stdout, stderr)
	case "story":
		err = runStory(ctx, rest, getenv, stdout, stderr)
	case "serve":
		err = runServe(ctx, rest, getenv, stdout, stderr)
	case "migrate":
		err = runMigrate(ctx, rest, getenv, stdout, stderr)
	case "catalogue":
		err = runCatalogue(ctx, rest, getenv, stdout, stderr)
	case "probe":
		err = runProbe(ctx, rest, stdout, stderr)
	case "token":
		err = runToken(ctx, rest, getenv, stdout)
	case "version", "--version":
		err = runVersion(ctx, rest, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage+config.Help())
		return nil
	default:
		fmt.Fprint(stderr, usage+config.Help())
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
	if errors.Is(err, errHelpShown) {
		return nil
	}
	return err
}

// newLogger builds the one logger of the process.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// withDefaults returns a getenv that answers defs for unset variables, so a
// command can have defaults of its own (the demo widens the race window).
func withDefaults(getenv func(string) string, defs map[string]string) func(string) string {
	return func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return defs[k]
	}
}
