-- Reserve units for a buyer of the redis-atomic stage, atomically. Runs
-- after refusal.lua.
-- KEYS[1] stock, KEYS[2] buyers (a set), KEYS[3] pending reservations (a hash),
-- KEYS[4] orders queued by redis-stream and not yet written (a hash)
-- ARGV[1] user, ARGV[2] quantity, ARGV[3] order no, ARGV[4] now in ms
-- Returns the stock left, or refusal's code: -1 sold out, -2 not loaded,
-- -3 already bought, -4 sold out for now.
local refused = refusal(KEYS, ARGV)
if refused then return refused end
local q = tonumber(ARGV[2])
local left = redis.call('DECRBY', KEYS[1], q)
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[2] .. '|' .. ARGV[4] .. '|' .. ARGV[1])
return left
