package main

import (
	"errors"
	"time"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/metrics"
)

// lockClients are one instance's lock clients: each instance has its own,
// as a separate process would. Either is nil when its Redis is not
// configured, which leaves its stages out.
type lockClients struct {
	locker *lock.Client  // on the main Redis: redis-lock and the fleet-wide jobs
	quorum *lock.RedLock // on the redlock servers: redlock
}

func newLockClients(cfg config.Config, b backends, m *metrics.Metrics) (lockClients, error) {
	var (
		l   lockClients
		err error
	)
	if len(b.redlock) > 0 {
		// The per-instance timeout must stay far below the TTL (the time
		// spent asking is subtracted from the validity), yet above the
		// queueing delay of a busy Redis: TTL/20 is 250ms for the default.
		l.quorum, err = lock.NewRedLock(b.redlock, lock.RedLockOptions{
			Options:         lock.Options{Hooks: m.LockHooks("redlock")},
			InstanceTimeout: max(50*time.Millisecond, cfg.LockTTL/20),
		})
		if err != nil {
			return l, err
		}
	}
	if b.redis != nil {
		if l.locker, err = lock.New(b.redis, lock.Options{Hooks: m.LockHooks("redis"), Replicas: cfg.LockReplicas}); err != nil {
			return l, errors.Join(err, l.close())
		}
	}
	return l, nil
}

func (l lockClients) close() error {
	var errs []error
	if l.locker != nil {
		errs = append(errs, l.locker.Close())
	}
	if l.quorum != nil {
		errs = append(errs, l.quorum.Close())
	}
	return errors.Join(errs...)
}
