-- Renew the places of one client's fair waiters on a lock, in one call
-- instead of one try per waiter (see keeper.go). A place that has been
-- dropped is not given back: its waiter joins the end of the line at its
-- next try. While the lock is free, the first in line is woken: its
-- wake-up may have been lost, or gone to a waiter that died.
-- KEYS[1] the lock, KEYS[2] the waiting record, KEYS[3] the line,
-- KEYS[4] the leases (see fair_queue.lua)
-- ARGV[1] a place's lease in ms, ARGV[2] the waiting record's TTL in ms,
-- ARGV[3...] the waiters' ids
-- Returns how many of them still had a place.
local now = clock()
prune(KEYS[3], KEYS[4], now)
local kept = 0
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[3], ARGV[i]) then
    redis.call('ZADD', KEYS[4], now + tonumber(ARGV[1]), ARGV[i])
    kept = kept + 1
  end
end
local head = liveHead(KEYS[3], KEYS[4], now)
if not head then
  return kept
end
redis.call('PEXPIRE', KEYS[3], ARGV[1])
redis.call('PEXPIRE', KEYS[4], ARGV[1])
point(KEYS[2], head, ARGV[2])
if isFree(redis.call('GET', KEYS[1])) then
  redis.call('PUBLISH', KEYS[1] .. ':wake', head)
end
return kept
