-- Give up on a queued order that cannot be written: give its units back to
-- the copy, remember it as failed, and move its entry to the dead-letter
-- stream. Only the first call for an order does any of that (the HDEL), so
-- a redelivered or reclaimed entry cannot give its units back twice.
-- KEYS[1] stock, KEYS[2] queued, KEYS[3] the order stream, KEYS[4] the
-- dead-letter stream, KEYS[5] failed orders (a hash)
-- ARGV[1] consumer group, ARGV[2] entry id, ARGV[3] order no, ARGV[4] reason,
-- ARGV[5] most entries the dead-letter stream keeps
-- Returns 1 when this call gave the units back, 0 when settled before.
local rec = redis.call('HGET', KEYS[2], ARGV[3])
local n = 0
if rec then
  redis.call('HDEL', KEYS[2], ARGV[3])
  local q = tonumber(string.match(rec, '^(%d+)|'))
  redis.call('INCRBY', KEYS[1], q)
  redis.call('HSET', KEYS[5], ARGV[3], ARGV[4] .. '|' .. rec)
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'no', ARGV[3], 'reason', ARGV[4], 'order', rec, 'entry', ARGV[2])
  n = 1
end
redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
return n
