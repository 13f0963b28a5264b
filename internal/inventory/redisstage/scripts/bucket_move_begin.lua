-- Begin a move of the sweeper (redis-sharded): number it and write it in
-- the item's journal of moves in flight, before any unit leaves a bucket.
-- Both keys are in bucket 0's slot.
-- KEYS[1] the moves in flight (a hash: id -> 'from|to|units'),
-- KEYS[2] the number of moves ever begun (never reset, so ids are unique)
-- ARGV[1] the bucket to take from, ARGV[2] the bucket to put into,
-- ARGV[3] units
-- Returns the move's id.
local id = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], id, ARGV[1] .. '|' .. ARGV[2] .. '|' .. ARGV[3])
return id
