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

// measure fills the catalogue to n items, starts the instance, and
// measures its start and its idle window.
func measure(ctx context.Context, o options, n int) (point, error) {
	p := point{Items: n, Fleet: o.fleet, Label: o.label}
	dbEnv := "SECKILL_MYSQL_DSN=" + o.dsn
	if o.fleet == "demo" {
		dbEnv = "SECKILL_DEMO_DB=" + filepath.Join(o.out, "demo", "seckill.db")
	}
	began := time.Now()
	fill := exec.CommandContext(ctx, o.bin, "catalogue", "-items", strconv.Itoa(n))
	fill.Env = environ(dbEnv)
	if out, err := fill.CombinedOutput(); err != nil {
		return p, fmt.Errorf("seckill catalogue: %w: %s", err, out)
	}
	p.FillSeconds = time.Since(began).Seconds()
	if o.fleet == "demo" {
		return measureDemo(ctx, o, p, dbEnv)
	}
	return measureServe(ctx, o, p, dbEnv)
}

// measureServe runs one seckill serve on MySQL and a private Redis.
func measureServe(ctx context.Context, o options, p point, dbEnv string) (point, error) {
	addrs, err := freeAddrs(2)
	if err != nil {
		return p, err
	}
	rs, err := startRedisServer(ctx, o.out, addrs[0])
	if err != nil {
		return p, err
	}
	defer func() { _ = rs.stop(5 * time.Second) }()
	rdb := redis.NewClient(&redis.Options{Addr: addrs[0], DisableIdentity: true})
	defer func() { _ = rdb.Close() }()
	inst, err := start(o.bin, environ(dbEnv, "SECKILL_REDIS_ADDR="+addrs[0], "SECKILL_ADDR="+addrs[1],
		"SECKILL_ADMIN_TOKEN=catsweep", "SECKILL_INSTANCE=catsweep", "SECKILL_LOG_LEVEL=warn"),
		filepath.Join(o.out, fmt.Sprintf("serve-%d.log", p.Items)), "serve")
	if err != nil {
		return p, err
	}
	defer func() { _ = inst.stop(30 * time.Second) }()
	return window(ctx, o, p, inst, []string{"http://" + addrs[1]}, rdb)
}

// measureDemo runs seckill demo (three instances and embedded Redis in
// one process): its Redis cannot be read apart, its CPU is the process's.
func measureDemo(ctx context.Context, o options, p point, dbEnv string) (point, error) {
	addrs, err := freeAddrs(4)
	if err != nil {
		return p, err
	}
	inst, err := start(o.bin, environ(dbEnv, "SECKILL_ADMIN_TOKEN=catsweep"),
		filepath.Join(o.out, fmt.Sprintf("demo-%d.log", p.Items)), "demo", "-addr", addrs[0], "-instances", strings.Join(addrs[1:], ","))
	if err != nil {
		return p, err
	}
	defer func() { _ = inst.stop(30 * time.Second) }()
	var urls []string
	for _, a := range addrs[1:] {
		urls = append(urls, "http://"+a)
	}
	return window(ctx, o, p, inst, urls, nil)
}

// window times the instance until ready, waits o.settle, and measures
// o.window of idle: rdb is nil when there is no Redis to read.
func window(ctx context.Context, o options, p point, inst *proc, urls []string, rdb *redis.Client) (point, error) {
	took, ready := waitReady(ctx, inst, urls, o.readyTimeout)
	p.ReadySeconds, p.Ready = took.Seconds(), ready
	select {
	case <-inst.exited:
		// What an operator meets: no window to measure, the reason in the log.
		p.Exited, p.Ready = lastError(inst.log.Name()), false
		return p, nil
	case <-ctx.Done():
		return p, ctx.Err()
	case <-time.After(o.settle):
	}
	pb, err := readProc(inst.pid())
	if err != nil {
		return p, err
	}
	rb, err := readRedis(ctx, rdb)
	if err != nil {
		return p, err
	}
	began := time.Now()
	select {
	case <-ctx.Done():
		return p, ctx.Err()
	case <-time.After(o.window):
	}
	pa, err := readProc(inst.pid())
	if err != nil {
		return p, err
	}
	ra, err := readRedis(ctx, rdb)
	if err != nil {
		return p, err
	}
	p.Idle = idleOver(time.Since(began), pb, pa, os.Getpagesize(), rb, ra)
	return p, nil
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
