package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/seckill-lab/seckill/loadtest/cpu"
)

// newCPUMeter lists the processes whose CPU the lab reads around each
// attack (package cpu): each instance process behind the targets, every
// Redis of o.cpuRedis, the local MySQL of o.mysqlDSN, and the lab.
func newCPUMeter(ctx context.Context, f *fleet, o options, procs cpu.Procs) *cpu.Meter {
	var sources []cpu.Source
	sources = append(sources, cpu.InstanceSources(ctx, f.infos, f.targets, f.processCPU, procs)...)
	// A Redis that does not answer must not hold the lab up for a whole
	// request timeout twice per attack.
	sources = append(sources, cpu.RedisSources(o.cpuRedis, o.redisPassword, min(o.timeout, 2*time.Second))...)
	sources = append(sources, cpu.MySQLSource(o.mysqlDSN, procs), cpu.LabSource())
	return cpu.NewMeter(sources...)
}

// processCPU reads the CPU seconds of the process behind target from its
// /metrics.
func (f *fleet) processCPU(ctx context.Context, target string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s/metrics: %w", target, err)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("%s/metrics: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s/metrics answered %s", target, resp.Status)
	}
	// getrusage's sum, exact to the µs, where the instance exports it;
	// else the process collector's, in 10 ms clock ticks.
	if v, ok := gauge(string(b), "seckill_process_cpu_rusage_seconds_total"); ok {
		return v, nil
	}
	v, ok := gauge(string(b), "process_cpu_seconds_total")
	if !ok {
		return 0, fmt.Errorf("%s/metrics has no process_cpu_seconds_total", target)
	}
	return v, nil
}
