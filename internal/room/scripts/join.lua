-- Join a room: give the next place, on the room's clock (Redis TIME).
-- KEYS[1] the room's hash. ARGV[1] a random seed, used if this join is the
-- first after the opening span (it closes the draw: the early joiners'
-- places are then permuted by that seed).
-- Returns {1, epoch, place, early, now_ms, drawn, seed} or {-1} when the room
-- is gone.
local h = KEYS[1]
-- A removed room leaves a tombstone (a hash without an epoch), see remove.lua.
if redis.call('HEXISTS', h, 'epoch') == 0 then return {-1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HMGET', h, 'epoch', 'opens_ms', 'shuffle_ms', 'drawn', 'seed')
local drawn = tonumber(f[4])
local seed = tonumber(f[5])
local early = 0
if drawn < 0 then
  if now < tonumber(f[2]) + tonumber(f[3]) then
    early = 1
  else
    drawn, seed = tonumber(redis.call('HGET', h, 'next')), tonumber(ARGV[1])
    redis.call('HSET', h, 'drawn', drawn, 'seed', ARGV[1])
  end
end
local place = redis.call('HINCRBY', h, 'next', 1)
return {1, tonumber(f[1]), place, early, now, drawn, seed}
