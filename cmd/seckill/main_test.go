package main

import (
	"testing"

	"github.com/seckill-lab/seckill/internal/testkit"
)

func TestMain(m *testing.M) {
	// The demo tests wait (for healthy instances, payment windows, jobs'
	// next turns) more than they compute, and each runs its own demo on
	// its own ports and SQL file: go test's default runs those waits two
	// by two on a 2-core machine.
	testkit.ParallelAtLeast(4)
	testkit.Main(m)
}
