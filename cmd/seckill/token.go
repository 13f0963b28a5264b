package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/seckill-lab/seckill/internal/config"
)

const tokenAbout = `Make sure an admin token exists at -file, and print it: a token already
there (8 characters or more) is kept, otherwise a random one is written,
readable by this user only. With SECKILL_ADMIN_TOKEN set, that token is
printed and nothing is written. docker-compose.yml runs it once as its
"token" service, so 'docker compose up' needs no variable and
'docker compose logs token' shows the token; the replicas read the file
through SECKILL_ADMIN_TOKEN_FILE.`

func runToken(_ context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c := newCommand("token", "", tokenAbout, false)
	file := c.fs.String("file", getenv("SECKILL_ADMIN_TOKEN_FILE"), "where the token is kept (default: SECKILL_ADMIN_TOKEN_FILE)")
	if err := c.parse(args, stdout); err != nil {
		return err
	}
	if t := strings.TrimSpace(getenv("SECKILL_ADMIN_TOKEN")); t != "" {
		if err := config.CheckAdminToken(t); err != nil {
			return fmt.Errorf("SECKILL_ADMIN_TOKEN: %w", err)
		}
		fmt.Fprintf(stdout, "admin token: %s (from SECKILL_ADMIN_TOKEN)\n", t)
		return nil
	}
	if *file == "" {
		return fmt.Errorf("%w: token: -file (or SECKILL_ADMIN_TOKEN_FILE) names no file", errUsage)
	}
	old, err := config.ReadTokenFile(*file)
	switch {
	case err == nil && config.CheckAdminToken(old) == nil:
		fmt.Fprintf(stdout, "admin token: %s (kept in %s)\n", old, *file)
		return nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("read the admin token: %w", err)
	}
	replaced := ""
	if err == nil {
		// A file that is there but holds no usable token is replaced, and
		// the output says so.
		replaced = "; it held no usable token, and was replaced"
	}
	t := randomToken()
	if err := writeSecret(*file, t); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "admin token: %s (new, in %s%s)\n", t, *file, replaced)
	return nil
}
