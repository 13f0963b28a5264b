package main

import (
	"context"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
)

// kindStages are the stages of one kind of item, and those of their
// pieces the rest of the instance needs.
type kindStages struct {
	stages     map[string]inventory.Stage
	redisStock *redisstage.RedisAtomic // redis-atomic, over the Redis copy of the stock; nil without Redis
	queue      *redisstage.RedisStream // redis-stream; nil without Redis
	// sharded is redis-sharded, whose buckets the reconcile job repairs;
	// nil without Redis.
	sharded *redisstage.RedisSharded
	crowd   *admission.Crowd
}

// logGiveBacks makes svc's audits list the units the Redis stages gave
// back (redis-stream shares redis-atomic's copy, and its log).
func (k kindStages) logGiveBacks(svc *inventory.Service) {
	if k.redisStock != nil {
		svc.WithGiveBackLog(k.redisStock)
	}
	if k.sharded != nil {
		svc.WithGiveBackLog(k.sharded)
	}
}

// lifecycle is what the service of this kind does with its orders after
// the buy; without Redis, no copy and no queue (nil interfaces, not nil
// pointers in them).
func (k kindStages) lifecycle(paymentTimeout time.Duration) inventory.Lifecycle {
	l := inventory.Lifecycle{PaymentTimeout: paymentTimeout}
	if k.redisStock != nil {
		l.RedisStock = k.redisStock
	}
	if k.queue != nil {
		l.Queue = k.queue
	}
	return l
}

// stages builds every stage the backends allow for one kind of item. The
// safe stages sit behind one crowd control (sold-out memory, bounded
// queue); the teaching stages do not, since their race is the lesson.
// With Redis, it also starts redis-stream's order writer.
func (p *parts) stages(st *store.Ledger, kind string) kindStages {
	co := admission.CrowdOptions{Queue: p.cfg.ItemQueue, QueueMax: p.cfg.ItemQueueMax, Within: p.cfg.LockWait, Kind: kind, Refused: p.metrics.Refused(kind)}
	if p.rate != nil {
		co.Admit, co.Admitting, co.AdmitInScript = p.rate.admit, p.rate.on, p.rate.admitInScript
		// The opening draw is switched with the rate limit: both are the
		// sale's answer to scripts (PUT /api/v1/admin/rate-limit).
		co.Draw = admission.NewDraw(admission.DrawOptions{
			Span: p.rate.draw,
			Opening: func(ctx context.Context, id int64) (time.Time, error) {
				it, err := st.Get(ctx, id)
				return it.Window.OpensAt, err
			},
			RefNow: st.Now,
		})
	}
	if p.b.redis != nil {
		co.Epochs = p.epochs
	}
	k := kindStages{crowd: admission.NewCrowd(co)}
	section := inventory.SectionOptions{Delay: p.cfg.CriticalSectionDelay, Fencing: p.cfg.Fencing, Logger: p.log}
	lockOpt := inventory.LockOptions{TTL: p.cfg.LockTTL, Wait: p.cfg.LockWait}
	if p.epochs != nil {
		// A unit given back whose announcement failed must not stay unsold
		// behind another instance's memory: tell the fleet again. And
		// what the instance keeps of items idle for a while goes, so that
		// its memory and its metrics follow the items being sold
		// (admission/idle.go; no Redis command unless a retry is owed).
		p.bg.every(p.cfg.SoldOutLease, func(ctx context.Context) {
			if err := k.crowd.RetryRestocks(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("announcing a restock failed again; retrying", "kind", kind, "err", err)
			}
			k.crowd.DropIdle()
			p.metrics.DropIdle()
		})
	}
	k.stages = map[string]inventory.Stage{
		inventory.StageUnlocked:   inventory.NewUnlocked(st, kind, section),
		inventory.StageLocalMutex: inventory.NewLocalMutex(st, kind, section),
		inventory.StageDBAtomic:   k.crowd.WrapNamed(inventory.StageDBAtomic, inventory.NewDBAtomic(st)),
	}
	if p.locks.locker != nil {
		fairOpt := lockOpt
		fairOpt.Fair = p.cfg.LockFair
		k.stages[inventory.StageRedisLock] = k.crowd.WrapNamed(inventory.StageRedisLock, inventory.NewRedisLock(p.locks.locker, st, kind, section, fairOpt))
		k.redisStock = redisstage.NewRedisAtomic(p.b.redis, st, kind, p.log)
		if p.b.batches != nil {
			// A batch carries several buyers: it goes on a connection
			// checked before use, never a stale one (reserve_batch.go).
			k.redisStock.SetBatchClient(p.b.batches)
		}
		k.redisStock.OnRestock(k.crowd.Restocked)
		k.redisStock.SetGroupLinger(p.cfg.GroupLinger)
		p.flushes = append(p.flushes, k.redisStock.WaitConfirms)
		// The Redis stages remember sell-outs too: a remembered one costs
		// no round trip, where their script costs one.
		k.stages[inventory.StageRedisAtomic] = k.crowd.WrapNamed(inventory.StageRedisAtomic, k.redisStock)
		k.queue = redisstage.NewRedisStream(k.redisStock, redisstage.StreamOptions{MaxLen: int64(p.cfg.StreamMaxLen), Logger: p.log,
			Durability: redisstage.Durability(p.cfg.StreamDurability), ReplicaWait: p.cfg.StreamReplicaWait})
		k.stages[inventory.StageRedisStream] = k.crowd.WrapNamed(inventory.StageRedisStream, k.queue)
		k.sharded = redisstage.NewRedisSharded(p.b.redis, st, kind, p.cfg.StockBuckets, p.log)
		k.sharded.OnRestock(k.crowd.Restocked)
		k.sharded.SetGroupLinger(p.cfg.GroupLinger)
		p.metrics.CountFallbacks(kind, k.sharded.Fallbacks)
		p.metrics.CountSweeps(kind, k.sharded.Sweeps, k.sharded.UnitsMoved)
		if p.cfg.StockSweepInterval > 0 {
			// Every instance sweeps the items any instance marked changed
			// (an idle pass is one Redis read): a move is safe beside another.
			sh := k.sharded
			p.bg.every(p.cfg.StockSweepInterval, func(ctx context.Context) {
				if err := sh.SweepChanged(ctx, p.cfg.StockSweepBelow); err != nil && ctx.Err() == nil {
					p.log.Warn("redis-sharded sweep failed", "kind", kind, "err", err)
				}
			})
		}
		k.stages[inventory.StageRedisSharded] = k.crowd.WrapNamed(inventory.StageRedisSharded, k.sharded)
		w := orderwriter.New(k.queue, st, orderwriter.Options{
			// Unique per process: a restarted instance is a new consumer,
			// and its predecessor's entries are claimed like any other's.
			Consumer:  p.cfg.Instance + "-" + kind + "-" + randomToken()[:8],
			ClaimIdle: p.cfg.StreamClaimIdle,
			Hooks:     p.metrics.WriterHooks(kind),
			Logger:    p.log,
		})
		w.OnRestock(k.crowd.Restocked)
		p.bg.run(func(ctx context.Context) {
			if err := w.Run(ctx); err != nil {
				p.log.Error("order writer stopped", "kind", kind, "err", err)
			}
		})
	}
	if p.locks.quorum != nil {
		k.stages[inventory.StageRedLock] = k.crowd.WrapNamed(inventory.StageRedLock, inventory.NewRedLock(p.locks.quorum, st, kind, section, lockOpt))
	}
	return k
}
