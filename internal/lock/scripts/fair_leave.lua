-- A waiter leaves the line of a fair lock (its wait ended without the
-- lock). When it stood first and the lock is free, the next in line is
-- woken at once rather than at its next try.
-- KEYS[1] the lock, KEYS[2] the waiting record, KEYS[3] the line,
-- KEYS[4] the leases (see fair_queue.lua)
-- ARGV[1] the waiter's id, ARGV[2] the waiting record's TTL in ms
-- Returns 1 when it had a place, 0 when not (it was dropped, or granted).
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  return 0
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local head = liveHead(KEYS[3], KEYS[4], (clock()))
point(KEYS[2], head, ARGV[2])
if head and isFree(redis.call('GET', KEYS[1])) then
  redis.call('PUBLISH', KEYS[1] .. ':wake', head)
end
return 1
