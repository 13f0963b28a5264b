-- The first half of a move: take up to the units of a move from its
-- source bucket, once. The units taken are recorded under the move's id,
-- so a second run (a finisher after a crash, or beside the sweeper)
-- answers the same count and takes nothing.
-- KEYS[1] the bucket's stock, KEYS[2] its moves out (a hash: id -> units)
-- ARGV[1] move id, ARGV[2] units wanted
-- Returns the units the move took.
local done = redis.call('HGET', KEYS[2], ARGV[1])
if done then return tonumber(done) end
local n = math.max(0, math.min(tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(ARGV[2])))
if n > 0 then redis.call('DECRBY', KEYS[1], n) end
redis.call('HSET', KEYS[2], ARGV[1], n)
redis.call('PEXPIRE', KEYS[2], 86400000)
return n
