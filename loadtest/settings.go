package main

import (
	"github.com/seckill-lab/seckill/loadtest/report"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// settingsOf records the run's configuration in its report.
func settingsOf(o options) report.Settings {
	s := report.Settings{Shape: o.shape, Stock: o.stock, Workers: o.workers, Sweep: o.sweep, TimeoutMS: results.MS(o.timeout),
		Product: o.product, Coupon: o.coupon, MySQLCheck: o.mysqlDSN != ""}
	if o.repeat > 1 {
		s.Repeat = o.repeat
	}
	if o.baselines {
		s.BaselineRequests, s.SoldOutStage = o.baselineRequests, o.soldOutStage
	}
	s.CPURedis = o.cpuRedis
	for _, sc := range o.scenarios {
		switch sc.crowd {
		case results.CrowdT0:
			s.T0Buyers, s.T0LeadMS = o.t0Buyers, results.MS(o.t0Lead)
		case results.CrowdPaced:
			s.PaceMS, s.PacedBuyers, s.FirstComeTargets = results.MS(o.pace), o.pacedBuyers, o.firstComeTargets
		case results.CrowdScalper:
			s.ScalperPeople, s.ScalperLimitIntervalMS, s.ScalperLimitBurst, s.ScalperTarget = o.scalperPeople, results.MS(o.scalperLimitInterval), o.scalperLimitBurst, o.scalperTarget
		}
	}
	if o.shape == "burst" {
		s.Buyers, s.MaxMS = o.buyers, results.MS(o.maxDuration)
	} else {
		s.Rate, s.DurationMS = o.rate, results.MS(o.duration)
	}
	return s
}
