-- Confirm a redis-atomic reservation whose order is committed: forget it.
-- Run by the Idempotency-Key settle's script (idempotency.Also), so the
-- keyed sale's stored answer and its confirm cost one round trip.
-- keys[1] pending reservations (a hash), args[1] order no
local function also(keys, args)
  redis.call('HDEL', keys[1], args[1])
end
