//go:build !unix

package metrics

// rusageCPU is not read where there is no getrusage.
func rusageCPU() (float64, bool) { return 0, false }
