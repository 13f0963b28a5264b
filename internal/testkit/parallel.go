package testkit

import (
	"flag"
	"runtime"
	"strconv"
)

// ParallelAtLeast lets at least n parallel tests run at once, unless
// -test.parallel was given; call it from TestMain, before m.Run. It is for
// packages whose tests spend their time waiting (for leases and records to
// run out, on paused servers and child processes, on sale windows), not
// computing: go test's default, GOMAXPROCS, runs such waits two by two on a
// 2-core machine. Tests that bring their own load stay out of t.Parallel.
func ParallelAtLeast(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(max(n, runtime.GOMAXPROCS(0)))); err != nil {
		panic("testkit.ParallelAtLeast outside a test binary: " + err.Error())
	}
}
