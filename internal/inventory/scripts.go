package inventory

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of the Redis stages, one file each in scripts/. They run
// with EVALSHA and fall back to EVAL on NOSCRIPT (redis.Script.Run), so a
// restarted or flushed server needs no load step.
var (
	reserve     = script("reserve")
	giveBack    = script("give_back")
	load        = script("load")
	snapshot    = script("snapshot")
	setIfQuiet  = script("set_if_quiet")
	beginCancel = script("begin_cancel")
	returnUnits = script("return_units")
	enqueue     = script("enqueue")
	settle      = script("settle")
	deadLetter  = script("dead_letter")
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// script loads scripts/name.lua; a missing file fails at start, in every
// test of the package.
func script(name string) *redis.Script {
	src, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(src))
}
