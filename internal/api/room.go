package api

import "time"

// PassHeader carries a waiting room's pass on a buy.
const PassHeader = "X-Seckill-Pass"

// Room is an item's waiting room, as the admin set it and as it stands
// (GET /api/v1/products/{id}/room, and PUT /api/v1/admin/products/{id}/room).
type Room struct {
	ProductID int64 `json:"product_id"`
	// Epoch names this room: setting the room again starts a new one, in
	// which the tickets and passes of the old one are expired.
	Epoch           int64     `json:"epoch"`
	PassesPerSecond int64     `json:"passes_per_second"`
	MaxInside       int64     `json:"max_inside"`
	ShuffleMS       int64     `json:"shuffle_ms"`
	PassTTLMS       int64     `json:"pass_ttl_ms"`
	OpensAt         time.Time `json:"opens_at"`
	// Joined counts the places given; NowAdmitting the places admitted
	// (a place is admitted when the count reaches it); Inside the pass
	// holders neither spent nor expired; Waiting the places not yet
	// admitted.
	Joined       int64 `json:"joined"`
	NowAdmitting int64 `json:"now_admitting"`
	Inside       int64 `json:"inside"`
	Waiting      int64 `json:"waiting"`
	// Drawn says whether the opening draw has closed: before it, the
	// early joiners' places are not known.
	Drawn bool `json:"drawn"`
	// SoldOut says whether no unit remains, sold or reserved: the room
	// admits nobody until units come back.
	SoldOut bool `json:"sold_out"`
	// OldestWaitMS is how long the first waiting place has waited.
	OldestWaitMS int64     `json:"oldest_wait_ms"`
	ServerTime   time.Time `json:"server_time"`
}

// RoomTicket is the answer to a join: the ticket to poll with, and the
// first status.
type RoomTicket struct {
	Ticket    string    `json:"ticket"`
	ArrivedAt time.Time `json:"arrived_at"`
	RoomStatus
}

// RoomStatus is what a poll tells the holder of a ticket.
type RoomStatus struct {
	// State is "drawing" (joined during the opening span; the place is
	// known when it ends), "waiting", "admitted" (pass is set) or
	// "sold-out" (no unit remains; poll again later: units may come
	// back before the window closes).
	State string `json:"state"`
	// Place is the ticket's place after the draw (0 while drawing);
	// Position the places until its turn, its own included (0 once
	// admitted).
	Place        int64 `json:"place"`
	Position     int64 `json:"position"`
	NowAdmitting int64 `json:"now_admitting"`
	// EstimatedWaitMS is the wait at the room's admission rate.
	EstimatedWaitMS int64 `json:"estimated_wait_ms"`
	// PollAfterMS is when to poll again; Retry-After says the same in
	// whole seconds, rounded up.
	PollAfterMS   int64      `json:"poll_after_ms"`
	Pass          string     `json:"pass,omitempty"`
	PassExpiresAt *time.Time `json:"pass_expires_at,omitempty"`
}

// RoomJoin is the body of a join.
type RoomJoin struct {
	UserID string `json:"user_id"`
}

// RoomPoll is the body of a poll.
type RoomPoll struct {
	UserID string `json:"user_id"`
	Ticket string `json:"ticket"`
}

// RoomSettings is the body of PUT /api/v1/admin/products/{id}/room.
type RoomSettings struct {
	PassesPerSecond int        `json:"passes_per_second"`
	MaxInside       int        `json:"max_inside"`
	ShuffleMS       int64      `json:"shuffle_ms"`
	PassTTLMS       int64      `json:"pass_ttl_ms"`
	OpensAt         *time.Time `json:"opens_at"`
}

// RoomRemoved is the answer to DELETE /api/v1/admin/products/{id}/room.
type RoomRemoved struct {
	ProductID int64 `json:"product_id"`
}
