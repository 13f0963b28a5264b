-- Spend a pass's place, once.
-- KEYS[1] the room's hash, KEYS[2] its spent places (zset), KEYS[3] the
-- Idempotency-Key each was spent with (hash). ARGV[1] the pass's epoch,
-- ARGV[2] its place, ARGV[3] the buy's Idempotency-Key ("" for none).
-- Returns {"ok"}, {"spent", key}, {"expired"} or {"gone"}.
if redis.call('HEXISTS', KEYS[1], 'epoch') == 0 then return {'gone'} end
local f = redis.call('HMGET', KEYS[1], 'epoch', 'expired')
if f[1] ~= ARGV[1] then return {'expired'} end
if tonumber(ARGV[2]) <= tonumber(f[2]) then return {'expired'} end
if redis.call('ZSCORE', KEYS[2], ARGV[2]) then
  return {'spent', redis.call('HGET', KEYS[3], ARGV[2]) or ''}
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
return {'ok'}
