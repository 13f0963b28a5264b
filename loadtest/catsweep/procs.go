package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a process the sweep started, with its log file.
type proc struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	log     *os.File
	started time.Time // time to ready counts from here
}

// start runs bin with args and env, its output into logPath.
func start(bin string, env []string, logPath string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, f, f
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("start %s: %w", bin, err), f.Close())
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), log: f, started: started}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// stop sends SIGTERM, and SIGKILL when the process has not ended within
// grace.
func (p *proc) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return p.log.Close()
}

// pid is the process's id, for /proc.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// freeAddrs finds n free loopback addresses.
func freeAddrs(n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// waitReady polls every url's /readyz until all answer 200, the process
// ends, or limit passes; it returns how long that took since the process
// started and whether they all got ready.
func waitReady(ctx context.Context, p *proc, urls []string, limit time.Duration) (time.Duration, bool) {
	began := p.started
	client := &http.Client{Timeout: time.Second}
	for time.Since(began) < limit {
		ready := 0
		for _, u := range urls {
			if res, err := client.Get(u + "/readyz"); err == nil {
				if res.StatusCode == http.StatusOK {
					ready++
				}
				_ = res.Body.Close()
			}
		}
		if ready == len(urls) {
			return time.Since(began), true
		}
		select {
		case <-ctx.Done():
			return time.Since(began), false
		case <-p.exited:
			return time.Since(began), false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return time.Since(began), false
}

// readProc samples /proc/<pid>/stat.
func readProc(pid int) (procSample, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procSample{}, err
	}
	return parseProcStat(string(b))
}

// startRedisServer starts a private redis-server with no persistence on
// addr, its files in dir, and waits until it answers.
func startRedisServer(ctx context.Context, dir, addr string) (*proc, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := start("redis-server", os.Environ(), filepath.Join(dir, "redis-"+port+".log"),
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			return p, c.Close()
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), p.stop(time.Second))
		case <-p.exited:
			return nil, fmt.Errorf("redis-server on %s exited; see its log in %s", addr, dir)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, errors.Join(fmt.Errorf("redis-server on %s did not answer in 10 s", addr), p.stop(time.Second))
}

// environ is this process's environment, plus extra, without the
// variables that would point the instance elsewhere than the sweep says
// (its database, its Redis, its address): other SECKILL_ settings pass
// through, for experiments (SECKILL_RECONCILE_INTERVAL=0 make
// catalogue-sweep).
func environ(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !sweepOwns(kv) {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// sweepOwns reports a variable the sweep sets or leaves unset itself.
func sweepOwns(kv string) bool {
	for _, p := range []string{"SECKILL_MYSQL_DSN=", "SECKILL_DEMO_DB=", "SECKILL_REDIS_", "SECKILL_REDLOCK_ADDRS=", "SECKILL_ADDR=", "SECKILL_PEERS=", "SECKILL_ADMIN_TOKEN"} {
		if strings.HasPrefix(kv, p) {
			return true
		}
	}
	return false
}
