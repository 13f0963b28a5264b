-- The second half of a move: add the units its first half took to the
-- destination bucket, once (recorded under the move's id).
-- KEYS[1] the bucket's stock, KEYS[2] its moves in (a hash: id -> units)
-- ARGV[1] move id, ARGV[2] units
-- Returns 1 when added, 0 when this move had added them already.
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('PEXPIRE', KEYS[2], 86400000)
redis.call('INCRBY', KEYS[1], ARGV[2])
return 1
