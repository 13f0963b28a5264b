package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// ProcessCPU reads the CPU seconds of the process behind target from its
// /metrics.
func (f *Fleet) ProcessCPU(ctx context.Context, target string) (float64, error) {
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
