//go:build unix

package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// BenchmarkMySQLLivenessCheck measures what the driver's check of every
// pooled connection before its first statement (checkConnLiveness: a
// non-blocking read of the socket) costs this process: SELECT 1 from 32
// goroutines over two pools of 16 connections, one checking and one not
// (as the store's), interleaved in slices of 2,000 statements so that
// both see the same machine. check/nocheck is the ratio of this
// process's CPU per statement.
func BenchmarkMySQLLivenessCheck(b *testing.B) {
	dsn := testenv.MySQLDSN(b)
	open := func(check bool) *sql.DB {
		cfg, err := mysqldriver.ParseDSN(dsn)
		if err != nil {
			b.Fatal(err)
		}
		cfg.CheckConnLiveness = check
		conn, err := mysqldriver.NewConnector(cfg)
		if err != nil {
			b.Fatal(err)
		}
		db := sql.OpenDB(conn)
		db.SetMaxOpenConns(16)
		db.SetMaxIdleConns(16)
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	check, nocheck := open(true), open(false)
	ctx := context.Background()
	var cpu [2]time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += 2000 {
		n := min(2000, b.N-done)
		for i, db := range []*sql.DB{check, nocheck} {
			cpu[i] += testkit.ParallelCPU(b, 32, n, func() error {
				var one int
				return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
			})
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu[0])/float64(b.N), "check-cpu-ns/op")
	b.ReportMetric(float64(cpu[1])/float64(b.N), "nocheck-cpu-ns/op")
	b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "check/nocheck")
}
