package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/story"
)

const storyAbout = `See it oversell, then see it stop: one burst of buyers per stage, in
teaching order, against the fleet at -url. Each stage starts from a freshly
reset product; the table shows what each sold, what it oversold, and a
verdict. unlocked and local-mutex oversell; every other stage sells exactly
its stock.

When nothing answers at the default -url (or at the -url of an explicit
-instances), story starts the demo itself there and leaves it running after
the table, for the dashboard; Ctrl-C stops it. -buyers must exceed -stock. The admin token comes from -token, else
SECKILL_ADMIN_TOKEN, else SECKILL_ADMIN_TOKEN_FILE, else the running demo's
token file (.demo/admin-token beside SECKILL_DEMO_DB).`

const storyDefaultURL = "http://127.0.0.1:8080"

func runStory(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("story", "", storyAbout, false)
	base := c.fs.String("url", storyDefaultURL, "base URL of the fleet: the demo's front page, nginx, or one instance")
	token := c.fs.String("token", "", "admin token (default: SECKILL_ADMIN_TOKEN, SECKILL_ADMIN_TOKEN_FILE, or the demo's token file)")
	buyers := c.fs.Int("buyers", 300, "buyers fired at once in each stage's burst")
	stock := c.fs.Int("stock", 100, "units the product is reset to before each burst")
	product := c.fs.Int64("product", 1, "the product to sell")
	stages := c.fs.String("stages", "", "comma-separated stages to run (default: every stage the fleet offers, in teaching order)")
	instances := c.fs.String("instances", ":8081,:8082,:8083", "the instances' addresses when story starts the demo itself")
	noDemo := c.fs.Bool("no-demo", false, "fail instead of starting the demo when nothing answers at -url")
	if err := c.parse(args, stdout); err != nil {
		return err
	}
	u, err := url.Parse(*base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%w: story: -url %q is not a base URL such as http://127.0.0.1:8080 (scheme, host and port; no path, query or fragment)", errUsage, *base)
	}
	if *buyers < 1 || *stock < 1 || *product < 1 {
		return fmt.Errorf("%w: story: -buyers, -stock and -product must be 1 or more", errUsage)
	}
	if *buyers <= *stock {
		return fmt.Errorf("%w: story: -buyers (%d) must exceed -stock (%d), or no stage can oversell", errUsage, *buyers, *stock)
	}
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	*token = strings.TrimSpace(*token)

	// Start the demo when nothing answers where the demo would be: at the
	// default URL, or where -instances says to start one.
	var demoDone chan error
	if !answers(ctx, *base) {
		if *noDemo || !loopbackURL(u) || u.Scheme != "http" || (set["url"] && !set["instances"]) {
			return fmt.Errorf("nothing answers at %s/healthz: start the demo (make run) or a fleet first, or name -instances to let story start the demo there", strings.TrimRight(*base, "/"))
		}
		if *token == "" {
			*token = strings.TrimSpace(getenv("SECKILL_ADMIN_TOKEN"))
		}
		if *token == "" {
			*token = randomToken()
		}
		demoEnv := withDefaults(getenv, map[string]string{"SECKILL_ADMIN_TOKEN": *token})
		demoDone = make(chan error, 1)
		fmt.Fprintf(stdout, "nothing answers at %s: starting the demo\n", *base)
		go func() {
			demoDone <- runDemo(ctx, []string{"-addr", u.Host, "-instances", *instances}, demoEnv, stdout, stderr)
		}()
		if err := waitAnswer(ctx, *base, demoDone); err != nil {
			if ctx.Err() != nil {
				<-demoDone // Ctrl-C while it started: let it shut down cleanly
			}
			return err
		}
	}
	if *token == "" {
		if *token, err = storyToken(getenv); err != nil {
			return err
		}
	}

	var only []string
	if *stages != "" {
		only = config.SplitList(*stages)
	}
	rows, err := story.Run(ctx, story.Options{
		URL: *base, Token: *token, ProductID: *product, Stock: *stock, Buyers: *buyers,
		Stages: only, Progress: stdout,
	})
	if len(rows) > 0 {
		fmt.Fprintln(stdout)
		story.Table(stdout, rows)
		if m := moral(rows); m != "" {
			fmt.Fprintln(stdout)
			fmt.Fprintln(stdout, m)
		}
	}
	if demoDone == nil {
		return err
	}
	// The demo story started stays up, also after a failed story (the
	// dashboard shows what happened), until Ctrl-C; it always shuts down
	// cleanly before story returns.
	if ctx.Err() == nil {
		if err != nil {
			fmt.Fprintf(stderr, "seckill: story: %v\n", err)
		}
		fmt.Fprintf(stdout, "\nthe demo keeps running: its dashboard at %s/ lists these bursts under Burst record; Ctrl-C stops it\n", strings.TrimRight(*base, "/"))
	}
	derr := <-demoDone
	if err != nil {
		return err
	}
	return derr
}

// why says, for an unsafe stage that oversold, what let it.
var why = map[string]string{
	"unlocked":    "unlocked reads the stock, checks it and writes it in separate steps, and buyers slip between them",
	"local-mutex": "local-mutex's lock lives in one process's memory, and the instances share one stock",
}

// moral sums the table up.
func moral(rows []story.Row) string {
	var parts []string
	safe, exact := 0, 0
	for _, r := range rows {
		switch {
		case r.Unsafe && (r.Oversold > 0 || !r.Conserved):
			if w, ok := why[r.Stage]; ok {
				parts = append(parts, w)
			}
		case !r.Unsafe:
			safe++
			if r.Exact() {
				exact++
			}
		}
	}
	switch {
	case safe == 0:
	case exact == safe && safe == 1:
		parts = append(parts, "the safe stage sold exactly its stock")
	case exact == safe:
		parts = append(parts, fmt.Sprintf("every safe stage (%d) sold exactly its stock", safe))
	default:
		parts = append(parts, fmt.Sprintf("%d of %d safe stages sold exactly their stock", exact, safe))
	}
	if len(parts) == 0 {
		return ""
	}
	m := strings.Join(parts, "; ") + "."
	return strings.ToUpper(m[:1]) + m[1:]
}

// storyToken finds the admin token of a fleet story did not start.
func storyToken(getenv func(string) string) (string, error) {
	if t := strings.TrimSpace(getenv("SECKILL_ADMIN_TOKEN")); t != "" {
		return t, nil
	}
	if file := getenv("SECKILL_ADMIN_TOKEN_FILE"); file != "" {
		t, err := config.ReadTokenFile(file)
		if err != nil {
			return "", fmt.Errorf("story needs the admin token: SECKILL_ADMIN_TOKEN_FILE: %w", err)
		}
		return t, nil
	}
	db := getenv("SECKILL_DEMO_DB")
	if db == "" {
		db = config.DefaultDemoDB
	}
	file := filepath.Join(filepath.Dir(db), "admin-token")
	t, err := config.ReadTokenFile(file)
	if err != nil {
		return "", fmt.Errorf("story needs the admin token: pass -token, set SECKILL_ADMIN_TOKEN, or run it in the folder of a running demo, which writes %s (%w)", file, err)
	}
	return t, nil
}

// answers reports whether base serves /healthz within a second.
func answers(ctx context.Context, base string) bool {
	_, err := getOK(ctx, strings.TrimRight(base, "/")+"/healthz", time.Second)
	return err == nil
}

// waitAnswer waits until base answers, or the demo serving it fails.
func waitAnswer(ctx context.Context, base string, failed <-chan error) error {
	for !answers(ctx, base) {
		select {
		case err := <-failed:
			if err == nil {
				err = errors.New("it stopped")
			}
			return fmt.Errorf("the demo did not start: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// loopbackURL reports whether u names this machine, where story may start
// a demo.
func loopbackURL(u *url.URL) bool {
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
