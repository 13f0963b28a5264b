package web_test

import (
	"testing"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestMain removes the seckill binary testkit builds for the demo.
func TestMain(m *testing.M) { testkit.Main(m) }
