-- Accept an order of the redis-stream stage, atomically: check the stock and
-- the buyer, take the units, record the buyer, and queue the order for the
-- writers. Every key shares the item's hash tag (one Cluster slot). Runs
-- after refusal.lua.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending (redis-atomic's
-- reservations), KEYS[4] queued (orders accepted, not yet written),
-- KEYS[5] the order stream, KEYS[6] the sale window (see refusal.lua)
-- ARGV[1] user, ARGV[2] quantity, ARGV[3] order no, ARGV[4] now in ms,
-- ARGV[5] stage, ARGV[6] instance, ARGV[7] most entries the stream may hold
-- Returns the stock left, -1 sold out, -2 not loaded, -3 already bought,
-- -4 sold out for now (units in flight may still come back), -5 the queue
-- is full, -6 not open yet, -7 closed; a code that comes with refusal's ms
-- comes as {code, ms}. The window is checked here, once: the writers that
-- take the order from the stream do not check it again.
local refused, ms = refusal(KEYS, ARGV, KEYS[6])
if refused then
  if ms then return {refused, ms} end
  return refused
end
if redis.call('XLEN', KEYS[5]) >= tonumber(ARGV[7]) then return -5 end
local q = tonumber(ARGV[2])
local left = redis.call('DECRBY', KEYS[1], q)
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[3], ARGV[2] .. '|' .. ARGV[4] .. '|' .. ARGV[1])
redis.call('XADD', KEYS[5], '*', 'no', ARGV[3], 'user', ARGV[1], 'qty', ARGV[2],
  'at', ARGV[4], 'stage', ARGV[5], 'instance', ARGV[6])
return left
