-- Give a reservation's units back, only if it is still pending, so that a
-- give-back racing the reconcile job cannot return them twice.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending
-- ARGV[1] order no, ARGV[2] user, ARGV[3] quantity
-- Returns 1 when given back, 0 when the reservation was already settled.
if redis.call('HDEL', KEYS[3], ARGV[1]) == 1 then
  redis.call('INCRBY', KEYS[1], ARGV[3])
  redis.call('SREM', KEYS[2], ARGV[2])
  return 1
end
return 0
