-- Set (or replace) a room: a new, empty room with a new epoch (its
-- creation instant on the room's clock, above any earlier epoch).
-- KEYS[1..4] the room's hash, steps, spent places and their keys.
-- ARGV: rate, max, shuffle_ms, pass_ms, opens_ms (0: now), channel, item.
-- Returns {epoch, opens_ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Above the epoch it replaces, and above a removal's instant (remove.lua):
-- an instance rejects the epochs up to a removal it heard of.
local epoch = math.max(now, tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') + 1,
  tonumber(redis.call('HGET', KEYS[1], 'removed') or '0') + 1)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
local opens = tonumber(ARGV[5])
if opens == 0 then opens = now end
redis.call('HSET', KEYS[1], 'epoch', epoch, 'rate', ARGV[1], 'max', ARGV[2], 'shuffle_ms', ARGV[3],
  'pass_ms', ARGV[4], 'opens_ms', opens, 'next', 0, 'drawn', -1, 'seed', 0, 'admitted', 0,
  'last_ms', now, 'expired', 0, 'sold_out', 0)
redis.call('PUBLISH', ARGV[6], table.concat({ARGV[7], epoch, 0, 0, -1, 0, 0, now, 0}, ' '))
return {epoch, opens}
