package scenario

import "time"

// Config is what the attacks need to know of the run; the CLI fills it
// from its flags, and no attack reads a flag itself.
type Config struct {
	// Stages are the stages to run; AllStages is set when --stages was
	// all: a scenario about the sale itself then runs on the safe stages
	// only (StagesOf).
	Stages    []string
	AllStages bool
	// Product is the product the buy and retry-storm scenarios sell, and
	// Coupon the batch the grab scenario hands out.
	Product int64
	Coupon  int64
	// Shape is burst (Buyers at once through Workers) or constant (Rate
	// per second for Duration, at most Workers in flight).
	Shape    string
	Buyers   int
	Rate     int
	Duration time.Duration
	Workers  int
	// Timeout is each request's; MaxDuration caps one burst: a stage too
	// slow to serve the crowd in time is stopped there, and its row says
	// how much was sent.
	Timeout     time.Duration
	MaxDuration time.Duration
	// Stock is what the item is reset to before each attack.
	Stock int
	// ProgressTTY redraws the progress line in place; set when stderr is
	// a terminal, so a log file gets whole lines instead of \r runs.
	ProgressTTY bool

	// T0Buyers is the T-0 crowd, each buyer with a connection of its own,
	// and T0Lead how far ahead of the reference clock's now the lab sets
	// the opening (t0.go).
	T0Buyers int
	T0Lead   time.Duration
	// Pace is the time between two paced arrivals, and PacedBuyers the
	// most arrivals the paced scenario sends (paced.go).
	Pace        time.Duration
	PacedBuyers int
	// FirstComeTargets are the paced scenario's targets per stage:
	// FirstComeTargets of fairness.go, changed by --first-come-target
	// (FirstComeNamed are the stages it named), and redis-lock's set
	// when the fleet's redis-lock is fair (FairLockTarget).
	FirstComeTargets map[string]float64
	FirstComeNamed   map[string]bool
	// ScalperPeople is the scalper scenarios' crowd (scalper.go); their
	// limited row sets a per-address limit of ScalperLimitBurst buys,
	// then one per ScalperLimitInterval, and fails when the scalpers'
	// gain is above ScalperTarget (with ScalperTargetVerdict).
	ScalperPeople        int
	ScalperLimitInterval time.Duration
	ScalperLimitBurst    int
	ScalperTarget        float64
	ScalperTargetVerdict bool
	// ScalperDraw is the opening draw the limited row sets beside the
	// limit (0: none).
	ScalperDraw time.Duration

	// ClosedUsers are the closed scenario's virtual users, each of which
	// buys, waits for its answer and comes back ClosedThink after it,
	// until ClosedDuration has passed or it has bought ClosedIterations
	// times (0: no such bound; one of the two is set) (closed.go).
	ClosedUsers      int
	ClosedThink      time.Duration
	ClosedDuration   time.Duration
	ClosedIterations int
	// The many scenario (many.go): ManyProducts products of ManyStock
	// units each, ManyBuyers buyers choosing by a Zipf law drawn from
	// ManySeed. ManyAllStages runs it on every stage of --stages all, not
	// redis-atomic alone.
	ManyProducts  int
	ManyStock     int
	ManyBuyers    int
	ManySeed      int64
	ManyAllStages bool
	// The waiting-room scenario (room.go): RoomPeople join a room of
	// RoomRate passes per second, RoomMaxInside pass holders at once and
	// a RoomShuffle opening span, the opening RoomLead ahead; RoomScalpers
	// of the people have 10 accounts each. The buy rate is taken over
	// RoomRateWindow; an account stops asking RoomGiveUp after the span.
	// RoomAllStages runs it on every safe stage of --stages all, not
	// redis-atomic alone.
	RoomPeople     int
	RoomScalpers   int
	RoomRate       int
	RoomMaxInside  int
	RoomShuffle    time.Duration
	RoomLead       time.Duration
	RoomRateWindow time.Duration
	RoomGiveUp     time.Duration
	RoomAllStages  bool
}
