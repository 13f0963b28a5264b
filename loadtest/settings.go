package main

import (
	"github.com/seckill-lab/seckill/loadtest/report"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/scenario"
)

// settingsOf records the run's configuration in its report.
func settingsOf(o options) report.Settings {
	s := report.Settings{Shape: o.Shape, Stock: o.Stock, Workers: o.Workers, Sweep: o.sweep, TimeoutMS: results.MS(o.Timeout),
		Product: o.Product, Coupon: o.Coupon, MySQLCheck: o.mysqlDSN != ""}
	if o.repeat > 1 {
		s.Repeat = o.repeat
	}
	if o.baselines {
		s.BaselineRequests, s.SoldOutStage = o.baselineRequests, o.soldOutStage
	}
	s.CPURedis = o.cpuRedis
	for _, sc := range o.scenarios {
		switch sc.Kind {
		case results.CrowdT0:
			s.T0Buyers, s.T0LeadMS = o.T0Buyers, results.MS(o.T0Lead)
		case results.CrowdPaced:
			s.PaceMS, s.PacedBuyers, s.FirstComeTargets = results.MS(o.Pace), o.PacedBuyers, o.FirstComeTargets
		case results.CrowdClosed:
			s.ClosedUsers, s.ClosedThinkMS, s.ClosedDurationMS, s.ClosedIterations = o.ClosedUsers, results.MS(o.ClosedThink), results.MS(o.ClosedDuration), o.ClosedIterations
		case results.CrowdScalper:
			s.ScalperPeople, s.ScalperLimitIntervalMS, s.ScalperLimitBurst, s.ScalperTarget = o.ScalperPeople, results.MS(o.ScalperLimitInterval), o.ScalperLimitBurst, o.ScalperTarget
		}
	}
	if o.Shape == "burst" {
		s.Buyers, s.MaxMS = o.Buyers, results.MS(o.MaxDuration)
	} else {
		s.Rate, s.DurationMS = o.Rate, results.MS(o.Duration)
	}
	return s
}

// scenes is what the report's headings say of every scenario.
func scenes() map[string]report.Scene {
	all := scenario.All()
	out := make(map[string]report.Scene, len(all))
	for _, sc := range all {
		out[sc.Name] = report.Scene{Crowd: sc.Kind, About: sc.About}
	}
	return out
}
