-- Re-create a room lost with its Redis (a restart without its data, a
-- failover that lost writes) from what an instance remembers of it. A
-- room that exists is left alone.
-- KEYS[1] the room's hash, KEYS[2] its admission steps: the admitted
-- places are counted inside until a pass's validity from now. ARGV: epoch, rate, max, shuffle_ms, pass_ms,
-- opens_ms, next, drawn, seed, admitted, expired, sold_out.
-- A room that exists is left alone, and so is one removed (its tombstone,
-- see remove.lua): an instance that missed the news of the removal must
-- not bring it back.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'rate', ARGV[2], 'max', ARGV[3], 'shuffle_ms', ARGV[4],
  'pass_ms', ARGV[5], 'opens_ms', ARGV[6], 'next', ARGV[7], 'drawn', ARGV[8], 'seed', ARGV[9],
  'admitted', ARGV[10], 'last_ms', now, 'expired', ARGV[11], 'sold_out', ARGV[12])
redis.call('ZADD', KEYS[2], ARGV[10], ARGV[10] .. ':' .. now)
return 1
