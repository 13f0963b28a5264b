package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// TestLabMySQLCheck runs the lab against two `seckill serve` instances on a
// fresh MySQL database with SECKILL_MYSQL_DSN set, and checks that the
// direct count was made and agrees with the audit, overselling or not.
func TestLabMySQLCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds seckill and runs the lab against its instances; left out of -short")
	}
	dsn := testenv.MySQLDSN(t)
	bin := testkit.BuildSeckill(t)
	if out, err := exec.CommandContext(t.Context(), bin, "migrate").CombinedOutput(); err == nil {
		t.Fatalf("migrate without SECKILL_MYSQL_DSN succeeded:\n%s", out)
	}
	migrate := exec.CommandContext(t.Context(), bin, "migrate")
	migrate.Env = []string{"SECKILL_MYSQL_DSN=" + dsn}
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("seckill migrate: %v\n%s", err, out)
	}

	d := &demo{token: "lab-mysql-" + randomHex(8)}
	for i, port := range testkit.FreePorts(t, 2) {
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		testkit.StartProcess(t, bin, []string{
			"SECKILL_MYSQL_DSN=" + dsn,
			"SECKILL_ADDR=" + strings.TrimPrefix(url, "http://"),
			fmt.Sprintf("SECKILL_INSTANCE=serve-%d", i+1),
			"SECKILL_ADMIN_TOKEN=" + d.token,
			"SECKILL_STAGE=db-atomic",
			"SECKILL_CRITICAL_SECTION_DELAY=5ms",
			"SECKILL_RECONCILE_INTERVAL=0",
			"SECKILL_LOG_LEVEL=warn",
		}, []string{url}, "serve")
		d.instances = append(d.instances, url)
	}

	env := map[string]string{"SECKILL_ADMIN_TOKEN": d.token, "SECKILL_MYSQL_DSN": dsn, "NO_COLOR": "1"}
	rep, err := runShortEnv(t, env, d.instances, "--stages", "unlocked,db-atomic", "--scenarios", "buy,grab")
	if err != nil {
		t.Fatalf("the lab failed: %v", err)
	}
	if !rep.Settings.MySQLCheck {
		t.Error("settings.mysql_check is false")
	}
	for _, r := range rep.Rows {
		if r.MySQL == nil {
			t.Errorf("%s/%s: no MySQL count", r.Scenario, r.Stage)
			continue
		}
		if r.Verdict != results.Pass || r.MySQL.Disagreement(&r) != "" || r.MySQL.Orders != r.Sold {
			t.Errorf("%s/%s: %s %q, MySQL %+v", r.Scenario, r.Stage, r.Verdict, r.Note, *r.MySQL)
		}
		if r.Stage == "unlocked" && r.Oversold == 0 {
			t.Errorf("%s/unlocked on two instances: nothing oversold", r.Scenario)
		}
	}
}
