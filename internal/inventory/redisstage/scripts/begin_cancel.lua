-- Mark an order as being cancelled and read the copy's generation, in one
-- step. While the mark stands, Repair leaves the copy alone (see
-- set_if_quiet.lua): a repair that read the database before the
-- cancellation committed would start a new generation without the unit,
-- and the unit, owed to the old one, would never come back.
-- KEYS[1] cancelling (a hash of order numbers), KEYS[2] gen
-- ARGV[1] order no, ARGV[2] how long the mark lasts if the canceller dies, in ms
-- Returns the generation, '' when the copy has none.
redis.call('HSET', KEYS[1], ARGV[1], '1')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local g = redis.call('GET', KEYS[2])
if not g then return '' end
return g
