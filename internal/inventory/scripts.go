package inventory

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of the Redis stages, one file each in scripts/. They run
// with EVALSHA and fall back to EVAL on NOSCRIPT (redis.Script.Run), so a
// restarted or flushed server needs no load step.
var (
	//go:embed scripts/reserve.lua
	reserveSrc string
	reserve    = redis.NewScript(reserveSrc)

	//go:embed scripts/give_back.lua
	giveBackSrc string
	giveBack    = redis.NewScript(giveBackSrc)

	//go:embed scripts/load.lua
	loadSrc string
	load    = redis.NewScript(loadSrc)

	//go:embed scripts/snapshot.lua
	snapshotSrc string
	snapshot    = redis.NewScript(snapshotSrc)

	//go:embed scripts/set_if_quiet.lua
	setIfQuietSrc string
	setIfQuiet    = redis.NewScript(setIfQuietSrc)

	//go:embed scripts/begin_cancel.lua
	beginCancelSrc string
	beginCancel    = redis.NewScript(beginCancelSrc)

	//go:embed scripts/return_units.lua
	returnUnitsSrc string
	returnUnits    = redis.NewScript(returnUnitsSrc)

	//go:embed scripts/enqueue.lua
	enqueueSrc string
	enqueue    = redis.NewScript(enqueueSrc)

	//go:embed scripts/settle.lua
	settleSrc string
	settle    = redis.NewScript(settleSrc)

	//go:embed scripts/dead_letter.lua
	deadLetterSrc string
	deadLetter    = redis.NewScript(deadLetterSrc)
)
