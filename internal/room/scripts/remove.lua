-- Remove a room, leaving a tombstone: its hash keeps only "removed" (the
-- removal's instant, at or above the removed room's epoch), which the
-- other scripts read as no room and restore.lua will not overwrite.
-- Setting the room again replaces it with an epoch above that instant.
-- KEYS[1..4] the room's hash, steps, spent places and their keys.
-- ARGV[1] the news channel, ARGV[2] the item's name in the news, ARGV[3]
-- the id the instances hearing the news acknowledge it under ("-": none).
-- Returns {removed, subscribers the news reached}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed = math.max(now, tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0'),
  tonumber(redis.call('HGET', KEYS[1], 'removed') or '0'))
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[1], 'removed', string.format('%.0f', removed))
local n = redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' 0 0 0 0 0 0 ' .. string.format('%.0f', removed) .. ' 0 ' .. ARGV[3])
return {removed, n}
