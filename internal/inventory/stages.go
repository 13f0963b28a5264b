package inventory

// The stages, in the order the workshop teaches them: each one fixes the
// oversell of the one before. This is the one list of their names; the
// configuration, the API, the dashboard and the lab all range over it.
const (
	StageUnlocked     = "unlocked"      // stage_unlocked.go: no guard; oversells
	StageLocalMutex   = "local-mutex"   // stage_local_mutex.go: oversells across instances
	StageRedisLock    = "redis-lock"    // stage_redis_lock.go: one Redis, lease, fence
	StageRedLock      = "redlock"       // stage_redlock.go: a quorum of Redis servers
	StageDBAtomic     = "db-atomic"     // stage_db_atomic.go: one guarded UPDATE
	StageRedisAtomic  = "redis-atomic"  // redisstage/stage_redis_atomic.go: a Lua script in front of it
	StageRedisStream  = "redis-stream"  // redisstage/stage_redis_stream.go: the database write behind a queue
	StageRedisSharded = "redis-sharded" // redisstage/stage_redis_sharded.go: one item's stock over N buckets
)

// Stages lists every stage name in teaching order.
var Stages = []string{StageUnlocked, StageLocalMutex, StageRedisLock, StageRedLock, StageDBAtomic, StageRedisAtomic, StageRedisStream, StageRedisSharded}

// ValidStage reports whether name is one of Stages.
func ValidStage(name string) bool {
	for _, s := range Stages {
		if s == name {
			return true
		}
	}
	return false
}

// Oversells reports whether a stage oversells by design when it runs on
// the given number of instances: unlocked always, local-mutex as soon as
// there is more than one instance (each has its own mutex).
func Oversells(stage string, instances int) bool {
	switch stage {
	case StageUnlocked:
		return true
	case StageLocalMutex:
		return instances > 1
	}
	return false
}

// Queues reports whether a stage only accepts its orders and writes them
// later (redis-stream): its buys answer 202, and its orders are pending
// until written.
func Queues(stage string) bool { return stage == StageRedisStream }
