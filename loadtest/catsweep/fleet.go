package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/glebarez/go-sqlite" // the demo's orders, read directly
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// freshDatabase drops and creates the sweep's database: the catalogue
// grows from one size to the next, so it must start empty. Only a
// database named catsweep… is touched.
func freshDatabase(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("-dsn: %w", err)
	}
	name := cfg.DBName
	if !strings.HasPrefix(name, "catsweep") || strings.ContainsAny(name, "`'\" ") {
		return fmt.Errorf("-dsn names database %q: the sweep drops its database, so its name must start with catsweep", name)
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	if err == nil {
		_, err = db.ExecContext(ctx, "CREATE DATABASE `"+name+"`")
	}
	return errors.Join(err, db.Close())
}

// fleet is what one catalogue size runs on: the instances (serve: N
// processes; demo: one process holding three), the URLs each one answers
// on, the private Redis (nil for the demo's embedded one), the database.
type fleet struct {
	procs []*proc
	names []string
	urls  [][]string // per process
	rdb   *redis.Client
	db    *sql.DB
	stops []func()
}

func (f *fleet) close() {
	for i := len(f.stops) - 1; i >= 0; i-- {
		f.stops[i]()
	}
}

// allURLs are every instance's URLs, for the buyers.
func (f *fleet) allURLs() []string {
	var out []string
	for _, us := range f.urls {
		out = append(out, us...)
	}
	return out
}

// measure fills the catalogue to n items, starts the fleet, and measures
// its start, its idle window and, with -bursts, the bursts and the idle
// window after them.
func measure(ctx context.Context, o options, n int) (sizeRun, error) {
	base := point{Items: n, Fleet: o.fleet, Label: o.label, Stage: o.stageName(), Instances: o.instances}
	dbEnv := "SECKILL_MYSQL_DSN=" + o.dsn
	dbDriver, dbSource := "mysql", o.dsn
	if o.fleet == "demo" {
		dbSource = filepath.Join(o.out, "demo", "seckill.db")
		dbEnv, dbDriver = "SECKILL_DEMO_DB="+dbSource, "sqlite"
	}
	began := time.Now()
	fill := exec.CommandContext(ctx, o.bin, "catalogue", "-items", strconv.Itoa(n))
	fill.Env = environ(dbEnv)
	if out, err := fill.CombinedOutput(); err != nil {
		return sizeRun{}, fmt.Errorf("seckill catalogue: %w: %s", err, out)
	}
	base.FillSeconds = time.Since(began).Seconds()
	f := &fleet{}
	defer f.close()
	var err error
	if o.fleet == "demo" {
		err = startDemo(ctx, o, n, dbEnv, f)
	} else {
		err = startServe(ctx, o, n, dbEnv, f)
	}
	if err != nil {
		return sizeRun{}, err
	}
	if f.db, err = sql.Open(dbDriver, dbSource); err != nil {
		return sizeRun{}, err
	}
	f.stops = append(f.stops, func() { _ = f.db.Close() })
	return runSize(ctx, o, base, f)
}

// startServe starts a private redis-server and o.instances seckill serve
// on it and the database, each with its own name and port.
func startServe(ctx context.Context, o options, n int, dbEnv string, f *fleet) error {
	addrs, err := freeAddrs(1 + o.instances)
	if err != nil {
		return err
	}
	rs, err := startRedisServer(ctx, o.out, addrs[0])
	if err != nil {
		return err
	}
	f.stops = append(f.stops, func() { _ = rs.stop(5 * time.Second) })
	f.rdb = redis.NewClient(&redis.Options{Addr: addrs[0], DisableIdentity: true})
	f.stops = append(f.stops, func() { _ = f.rdb.Close() })
	for i, addr := range addrs[1:] {
		name := fmt.Sprintf("catsweep-%d", i+1)
		env := environ(dbEnv, "SECKILL_REDIS_ADDR="+addrs[0], "SECKILL_ADDR="+addr,
			"SECKILL_ADMIN_TOKEN="+adminToken, "SECKILL_INSTANCE="+name, "SECKILL_LOG_LEVEL=warn")
		if o.stage != "" {
			env = append(env, "SECKILL_STAGE="+o.stage)
		}
		inst, err := start(o.bin, env, filepath.Join(o.out, fmt.Sprintf("serve-%d-%s.log", n, name)), "serve")
		if err != nil {
			return err
		}
		f.stops = append(f.stops, func() { _ = inst.stop(30 * time.Second) })
		f.procs, f.names = append(f.procs, inst), append(f.names, name)
		f.urls = append(f.urls, []string{"http://" + addr})
	}
	return nil
}

// startDemo runs seckill demo (three instances and embedded Redis in one
// process): its Redis cannot be read apart, its CPU is the process's.
func startDemo(ctx context.Context, o options, n int, dbEnv string, f *fleet) error {
	addrs, err := freeAddrs(4)
	if err != nil {
		return err
	}
	env := environ(dbEnv, "SECKILL_ADMIN_TOKEN="+adminToken)
	if o.stage != "" {
		env = append(env, "SECKILL_STAGE="+o.stage)
	}
	inst, err := start(o.bin, env, filepath.Join(o.out, fmt.Sprintf("demo-%d.log", n)),
		"demo", "-addr", addrs[0], "-instances", strings.Join(addrs[1:], ","))
	if err != nil {
		return err
	}
	f.stops = append(f.stops, func() { _ = inst.stop(30 * time.Second) })
	var urls []string
	for _, a := range addrs[1:] {
		urls = append(urls, "http://"+a)
	}
	f.procs, f.names, f.urls = []*proc{inst}, []string{"demo"}, [][]string{urls}
	return nil
}

// readRedis samples INFO commandstats and cpu; nil without a Redis.
func readRedis(ctx context.Context, rdb *redis.Client) (*redisSample, error) {
	if rdb == nil {
		return nil, nil
	}
	info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO: %w", err)
	}
	s, err := parseInfo(info)
	return &s, err
}

// lastError is the last line a seckill command printed as its error
// ("seckill: …"), or a pointer to the log when there is none.
func lastError(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return "exited; its log is unreadable: " + err.Error()
	}
	return exitLine(string(b), logPath)
}
