package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/store"
)

// runServe runs one instance against MySQL and Redis.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := mysqlConfig(newCommand("serve", "", "One instance on MySQL (SECKILL_MYSQL_DSN) and Redis (SECKILL_REDIS_ADDR); run three behind a\nload balancer for a fleet (see docker-compose.yml).", true), args, getenv, stdout)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	log.Info("starting", "config", cfg)

	pool := store.Pool{MaxConns: cfg.MySQLMaxConns, MaxLifetime: cfg.MySQLConnLifetime}
	if cfg.FreezeFencedWrite {
		if pool.FreezeFencedWrite, err = freezeProcess(log); err != nil {
			return fmt.Errorf("SECKILL_FREEZE_BEFORE_FENCED_WRITE: %w", err)
		}
	}
	db, err := openMySQL(ctx, cfg.MySQLDSN, pool)
	if err != nil {
		return err
	}
	b := backends{db: db}
	defer func() { closeBackends(b, log) }()
	if cfg.UsesRedis() {
		b.redis, b.batches = newRedisClient(cfg), newBatchClient(cfg)
		if err := b.redis.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%s: %w", redisTarget(cfg), err)
		}
	} else {
		log.Warn("neither SECKILL_REDIS_ADDR nor SECKILL_REDIS_SENTINELS is set: the Redis stages are unavailable")
	}
	for _, addr := range cfg.RedlockAddrs {
		b.redlock = append(b.redlock, redlockClient(addr, cfg.RedisPassword, cfg.RedisPool))
	}

	inst, err := newInstance(cfg, b, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := inst.close(); err != nil {
			log.Error("closing instance", "err", err)
		}
	}()
	ls, err := listen("set SECKILL_ADDR to a free address (e.g. SECKILL_ADDR=:9081)", newHTTPServer(cfg.Addr, inst.handler, cfg.RequestTimeout))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "seckill %s serving on %s (stage %s)\n", cfg.Instance, ls[0].ln.Addr(), cfg.Stage)
	return serveUntil(ctx, ls, cfg.ShutdownTimeout, log)
}

// dsnExample is what a MySQL DSN looks like, for error messages.
const dsnExample = "user:password@tcp(127.0.0.1:3306)/seckill"

// mysqlConfig parses a command that takes no flags and needs MySQL, and
// loads the configuration.
func mysqlConfig(c *command, args []string, getenv func(string) string, stdout io.Writer) (config.Config, error) {
	if err := c.parse(args, stdout); err != nil {
		return config.Config{}, err
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return cfg, fmt.Errorf("configuration:\n%w", err)
	}
	if cfg.MySQLDSN == "" {
		return cfg, fmt.Errorf("SECKILL_MYSQL_DSN is required by %s (e.g. %s); `seckill demo` needs no database", c.name, dsnExample)
	}
	if _, err := mysqldriver.ParseDSN(cfg.MySQLDSN); err != nil {
		return cfg, fmt.Errorf("SECKILL_MYSQL_DSN is not a MySQL DSN (%v); it looks like %s", err, dsnExample)
	}
	return cfg, nil
}

// openMySQL connects, refuses unsafe server settings, and migrates.
func openMySQL(ctx context.Context, dsn string, pool store.Pool) (*store.DB, error) {
	db, err := store.OpenMySQL(ctx, dsn, pool)
	if err != nil {
		return nil, fmt.Errorf("SECKILL_MYSQL_DSN: %w", err)
	}
	if err := db.CheckSafety(ctx); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if err := db.Migrate(ctx); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return db, nil
}

func closeBackends(b backends, log interface{ Error(string, ...any) }) {
	for _, c := range []redis.UniversalClient{b.redis, b.batches, b.idem} {
		if c == nil {
			continue
		}
		if err := c.Close(); err != nil {
			log.Error("closing redis", "err", err)
		}
	}
	for _, c := range b.redlock {
		if err := c.Close(); err != nil {
			log.Error("closing redlock client", "err", err)
		}
	}
	if b.db != nil {
		if err := b.db.Close(); err != nil {
			log.Error("closing database", "err", err)
		}
	}
}

// runMigrate applies the schema to SECKILL_MYSQL_DSN.
func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := mysqlConfig(newCommand("migrate", "", "Apply sql/mysql to SECKILL_MYSQL_DSN and exit (serve also does it at start).", true), args, getenv, stdout)
	if err != nil {
		return err
	}
	db, err := openMySQL(ctx, cfg.MySQLDSN, store.Pool{MaxConns: cfg.MySQLMaxConns, MaxLifetime: cfg.MySQLConnLifetime})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "schema applied")
	return db.Close()
}
