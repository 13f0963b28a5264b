-- Return a cancelled order's units to the Redis copy, at most once, and only
-- to the copy they were owed to.
-- KEYS[1] stock, KEYS[2] returned (order numbers already returned), KEYS[3] gen
-- ARGV[1] order no, ARGV[2] quantity, ARGV[3] the copy generation owed
-- Returns 1 when returned, 0 when returned before, or when the copy was
-- reloaded since (its stock came from a database that has the units).
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return 0 end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('INCRBY', KEYS[1], ARGV[2])
return 1
