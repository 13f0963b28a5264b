-- Reserve units for a buyer of the redis-atomic stage. A chunk, after
-- refusal.lua: answer.lua runs it as the stage's script, and fold.lua runs
-- it inside the Idempotency-Key claim's script (see Fold).
-- keys[1] stock, keys[2] buyers (a set), keys[3] pending reservations (a
-- hash), keys[4] orders queued by redis-stream and not yet written (a
-- hash), keys[5] the sale window (see refusal.lua)
-- args[1] user, args[2] quantity, args[3] order no
-- Returns the stock left, or refusal's code and its ms: -1 sold out, -2
-- not loaded, -3 already bought, -4 sold out for now, -6 not open yet, -7
-- closed.
--
-- The reservation is stamped with Redis's clock, as the reconcile job that
-- ages it reads it (RedisAtomic.Repair): no instance's clock is asked.
local function take_units(keys, args)
  local refused, ms = refusal(keys, args, keys[5])
  if refused then return refused, ms end
  local left = redis.call('DECRBY', keys[1], tonumber(args[2]))
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SADD', keys[2], args[1])
  redis.call('HSET', keys[3], args[3], args[2] .. '|' .. now .. '|' .. args[1])
  return left
end
