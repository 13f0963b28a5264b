// Command seckill runs the flash-sale service: `serve` for one instance on
// real MySQL and Redis, `demo` for three instances on embedded backends with
// nothing installed, and `migrate` to apply the schema.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2) // the command line itself was wrong
		}
		os.Exit(1)
	}
}
