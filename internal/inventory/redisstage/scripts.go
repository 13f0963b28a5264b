package redisstage

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of the Redis stages, one file each in scripts/. They run
// with EVALSHA and fall back to EVAL on NOSCRIPT (redis.Script.Run), so a
// restarted or flushed server needs no load step. The checks a buy must
// pass before it takes units live once, in refusal.lua, and are put in
// front of the scripts that take units.
var (
	reserve     = script("refusal", "reserve", "answer")
	giveBack    = script("giveback_log", "give_back")
	load        = script("load")
	snapshot    = script("snapshot")
	setIfQuiet  = script("set_if_quiet")
	beginCancel = script("begin_cancel")
	returnUnits = script("return_units")
	enqueue     = script("refusal", "enqueue", "answer")
	clock       = script("clock")

	// redis-stream's items with work on a Cluster (stream_work.go).
	workingItems = script("working_items")

	// redis-sharded's, one bucket at a time.
	take         = script("bucket_take")
	takeOver     = script("bucket_take_over", "bucket_take")
	unclaim      = script("bucket_unclaim")
	giveBackPart = script("giveback_log", "bucket_give_back")
	loadBucket   = script("bucket_load")
	adjustBucket = script("bucket_adjust")
	moveBegin    = script("bucket_move_begin")
	moveTake     = script("bucket_move_take")
	movePut      = script("bucket_move_put")
	moveState    = script("bucket_moves")
	markChanged  = script("sweep_mark")
	clearChanged = script("sweep_clear")

	// refuseSrc defines the Lua function refuse of the Idempotency-Key
	// claim (see RefusalCheck).
	refuseSrc = source("refusal", "refuse")
	// foldReserveSrc and foldEnqueueSrc define it as a claim that takes
	// the units, and confirmSrc the settle's also (see Fold).
	foldReserveSrc = source("refusal", "reserve", "fold")
	foldEnqueueSrc = source("refusal", "enqueue", "fold")
	confirmSrc     = source("confirm")
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// script loads scripts/name.lua for each name, in order, as one script; a
// missing file fails at start, in every test of the package.
func script(names ...string) *redis.Script { return redis.NewScript(source(names...)) }

func source(names ...string) string {
	var src []byte
	for _, name := range names {
		b, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
		if err != nil {
			panic(err)
		}
		src = append(append(src, b...), '\n')
	}
	return string(src)
}
