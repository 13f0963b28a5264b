package lock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run with EVALSHA and fall back to EVAL on NOSCRIPT (that is
// what redis.Script.Run does), so a flushed or restarted server, a new
// Cluster node, or miniredis all work without a separate load step.
var (
	//go:embed scripts/obtain.lua
	obtainSrc    string
	obtainScript = redis.NewScript(obtainSrc)

	//go:embed scripts/release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed scripts/refresh.lua
	refreshSrc    string
	refreshScript = redis.NewScript(refreshSrc)

	// The fair mode's scripts share the functions of its queue, which go
	// in front of each.
	//go:embed scripts/fair_queue.lua
	fairQueueSrc string

	//go:embed scripts/fair_obtain.lua
	fairObtainBody   string
	fairObtainSrc    = fairQueueSrc + fairObtainBody
	fairObtainScript = redis.NewScript(fairObtainSrc)

	//go:embed scripts/fair_leave.lua
	fairLeaveBody   string
	fairLeaveSrc    = fairQueueSrc + fairLeaveBody
	fairLeaveScript = redis.NewScript(fairLeaveSrc)

	//go:embed scripts/fair_renew.lua
	fairRenewBody   string
	fairRenewSrc    = fairQueueSrc + fairRenewBody
	fairRenewScript = redis.NewScript(fairRenewSrc)
)
