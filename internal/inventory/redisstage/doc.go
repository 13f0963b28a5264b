// Package redisstage holds the Redis stages: redis-atomic (a Lua script
// takes the units from a Redis copy of the stock, the database write
// follows), redis-stream (the same script queues the order, writers write
// it later: package orderwriter) and redis-sharded (one item's stock over
// several buckets). Beside them live what only they need: the scripts
// (scripts/, embedded), the group commit of their database writes,
// redis-stream's durability levels, the log of units given back, and the
// scripts the Idempotency-Key claim runs for them (a refusal check, or a
// fold that takes the units in the claim).
//
// They implement package inventory's stage contract (inventory.Stage, and
// the optional inventory.Folder, inventory.RefusalChecker, Resetter and
// WindowClock); inventory never imports this package. The composition
// root (cmd/seckill) builds them into its table of stages.
package redisstage
