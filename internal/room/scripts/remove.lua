-- Remove a room, leaving a tombstone: its hash keeps only "removed" (the
-- removal's instant), which the other scripts read as no room and
-- restore.lua will not overwrite. Setting the room again replaces it.
-- KEYS[1..4] the room's hash, steps, spent places and their keys.
-- ARGV[1] the news channel, ARGV[2] the item's name in the news.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[1], 'removed', now)
redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' 0 0 0 0 0 0 0 0')
return 1
