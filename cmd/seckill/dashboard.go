package main

import (
	"net"
	"time"

	"github.com/seckill-lab/seckill/internal/burst"
	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/store"
)

// dashboardFor builds the dashboard's server side of one instance: a fleet
// over SECKILL_PEERS (the demo sets them to its instances), or over this
// instance alone when none are set, and the lab's reports folder. The
// burst record keeps the verdicts, and the marks of bursts in flight in the
// database every instance shares.
func dashboardFor(cfg config.Config, bursts *store.Bursts) httpapi.Dashboard {
	peers := cfg.Peers
	if len(peers) == 0 {
		peers = []string{selfURL(cfg.Addr)}
	}
	return httpapi.Dashboard{
		Fleet:      burst.New(burstOptions(cfg, peers)),
		LabReports: cfg.LabReports,
		Verdicts:   bursts,
		Marks:      bursts,
	}
}

// burstOptions are the options of the dashboard's fleet. Its buyers wait
// for an answer longer than a buy may take (SECKILL_REQUEST_TIMEOUT): the
// instance answers every buy by then, 503 timeout at worst, and a buyer
// that left first would be counted as not answered while it was served.
func burstOptions(cfg config.Config, peers []string) burst.Options {
	return burst.Options{
		Peers: peers, AdminToken: cfg.AdminToken, Max: cfg.BurstMax,
		RequestTimeout: max(10*time.Second, cfg.RequestTimeout+5*time.Second),
	}
}

// selfURL is the URL this instance can call itself on: a wildcard or empty
// listen host means loopback.
func selfURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
