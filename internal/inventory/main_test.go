package inventory_test

import (
	"os"
	"testing"

	"github.com/seckill-lab/seckill/internal/testkit"
)

func TestMain(m *testing.M) {
	// The parallel tests (the sale windows on the reference clock, the
	// stream's durability) wait for windows to open and replicas to
	// answer far more than they compute: with go test's default, on a
	// 2-core machine, they waited two by two (the package took 40 s of the
	// short tier, 27 s with this floor).
	testkit.ParallelAtLeast(8)
	os.Exit(m.Run())
}
