package main

import (
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/config"
)

// TestDashboardBuyersWaitLongerThanABuyMayTake: the dashboard's burst gives
// each buyer more time than the instances may take for a buy, so a buy
// they answer late (a long lock wait under SECKILL_REQUEST_TIMEOUT=16s) is
// counted by its answer, not as "without an answer". With the burst's own
// default of 10 s, TestStoryAgainstTheDemo counted 127 of 150 redlock
// buyers without an answer on a busy machine.
func TestDashboardBuyersWaitLongerThanABuyMayTake(t *testing.T) {
	for _, rt := range []time.Duration{100 * time.Millisecond, 4 * time.Second, 16 * time.Second, 10 * time.Minute} {
		o := burstOptions(config.Config{RequestTimeout: rt, AdminToken: "t", BurstMax: 7}, []string{"http://a"})
		if o.RequestTimeout <= rt {
			t.Errorf("SECKILL_REQUEST_TIMEOUT=%s: the burst waits %s", rt, o.RequestTimeout)
		}
		if o.AdminToken != "t" || o.Max != 7 || len(o.Peers) != 1 {
			t.Errorf("options %+v lost the settings", o)
		}
	}
}
