-- Give a pass back: the buy that spent it was not run (a 503, a bad
-- request). Only the buy that spent it (the same Idempotency-Key) can.
-- KEYS[1] the spent places (zset), KEYS[2] their keys (hash).
-- ARGV[1] the place, ARGV[2] the key it was spent with.
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
