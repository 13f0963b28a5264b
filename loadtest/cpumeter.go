package main

import (
	"context"
	"time"

	"github.com/seckill-lab/seckill/loadtest/cpu"
	"github.com/seckill-lab/seckill/loadtest/fleet"
)

// newCPUMeter lists the processes whose CPU the lab reads around each
// attack (package cpu): each instance process behind the targets, every
// Redis of o.cpuRedis, the local MySQL of o.mysqlDSN, and the lab.
func newCPUMeter(ctx context.Context, f *fleet.Fleet, o options, procs cpu.Procs) *cpu.Meter {
	var sources []cpu.Source
	sources = append(sources, cpu.InstanceSources(ctx, f.Infos, f.Targets, f.ProcessCPU, procs)...)
	// A Redis that does not answer must not hold the lab up for a whole
	// request timeout twice per attack.
	sources = append(sources, cpu.RedisSources(o.cpuRedis, o.redisPassword, min(o.Timeout, 2*time.Second))...)
	sources = append(sources, cpu.MySQLSource(o.mysqlDSN, procs), cpu.LabSource())
	return cpu.NewMeter(sources...)
}
