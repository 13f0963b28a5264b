-- Reserve units for a buyer of the redis-atomic stage, atomically. Runs
-- after refusal.lua.
-- KEYS[1] stock, KEYS[2] buyers (a set), KEYS[3] pending reservations (a hash),
-- KEYS[4] orders queued by redis-stream and not yet written (a hash),
-- KEYS[5] the sale window (see refusal.lua)
-- ARGV[1] user, ARGV[2] quantity, ARGV[3] order no
-- Returns the stock left, or refusal's code: -1 sold out, -2 not loaded,
-- -3 already bought, -4 sold out for now, -6 not open yet, -7 closed; a
-- code that comes with refusal's ms comes as {code, ms}.
--
-- The reservation is stamped with Redis's clock, as the reconcile job that
-- ages it reads it (RedisAtomic.Repair): no instance's clock is asked.
local refused, ms = refusal(KEYS, ARGV, KEYS[5])
if refused then
  if ms then return {refused, ms} end
  return refused
end
local q = tonumber(ARGV[2])
local left = redis.call('DECRBY', KEYS[1], q)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[2] .. '|' .. now .. '|' .. ARGV[1])
return left
