-- Give a reservation's units back to the bucket they came from, only if it
-- is still in flight, so that a give-back racing the reconcile job cannot
-- return them twice. The record says how many units the bucket gave.
-- KEYS[1] the bucket's stock, KEYS[2] its reservations in flight, KEYS[3]
-- its log of units given back (see giveback_log.lua)
-- ARGV[1] order no
-- Returns 1 when given back, 0 when the reservation was already settled.
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then return 0 end
local units = tonumber(string.match(rec, '^(%d+)|'))
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('INCRBY', KEYS[1], units)
log_given_back(KEYS[3], rec, units)
return 1
