package cpu

import (
	"context"
	"time"

	"github.com/seckill-lab/seckill/loadtest/resp"
)

// NewMeter reads sources, in their order.
func NewMeter(sources ...Source) *Meter { return &Meter{Sources: sources} }

// RedisSources is one source per Redis server at addrs, read by INFO CPU
// within timeout (password for AUTH when set); with no addrs, one source
// that says why Redis is not measured.
func RedisSources(addrs []string, password string, timeout time.Duration) []Source {
	if len(addrs) == 0 {
		return []Source{{Kind: Redis, Name: "redis",
			Skip: "not measured: no --cpu-redis (an embedded Redis, as the demo's, counts in its instance's process)"}}
	}
	var out []Source
	for _, addr := range addrs {
		out = append(out, Source{Kind: Redis, Name: "redis " + addr, How: "INFO CPU", Read: func(ctx context.Context) (float64, error) {
			return resp.CPU(ctx, addr, password, timeout)
		}})
	}
	return out
}

// LabSource is the lab's own process.
func LabSource() Source {
	return Source{Kind: Lab, Name: "lab", Read: func(context.Context) (float64, error) { return labCPU() }}
}
