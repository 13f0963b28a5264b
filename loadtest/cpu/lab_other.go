//go:build !unix

package cpu

import "errors"

// labCPU needs getrusage, which this system lacks.
func labCPU() (float64, error) {
	return 0, errors.New("getrusage is not available on this system")
}
