-- Give a reservation's units back, only if it is still pending, so that a
-- give-back racing the reconcile job cannot return them twice.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] the item's log
-- of units given back (see giveback_log.lua)
-- ARGV[1] order no, ARGV[2] user, ARGV[3] quantity
-- Returns 1 when given back, 0 when the reservation was already settled.
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then return 0 end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('INCRBY', KEYS[1], ARGV[3])
redis.call('SREM', KEYS[2], ARGV[2])
log_given_back(KEYS[4], rec, ARGV[3])
return 1
