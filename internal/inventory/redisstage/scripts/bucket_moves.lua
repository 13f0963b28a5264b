-- Read an item's moves in flight and the number of moves ever begun
-- together (redis-sharded's sweeper; both keys in bucket 0's slot).
-- KEYS[1] the moves in flight, KEYS[2] the number of moves begun
-- Returns {moves begun, id, 'from|to|units', id, ...}.
local out = {tonumber(redis.call('GET', KEYS[2]) or '0')}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do out[#out + 1] = v end
return out
