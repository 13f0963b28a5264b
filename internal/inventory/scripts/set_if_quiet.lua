-- Correct the Redis stock, only if nothing moved since the snapshot and no
-- reservation, queued order or cancellation is in flight. The corrected copy starts a new
-- generation, like a loaded one: it was read from the database, so units
-- owed to the old copy by cancelled orders are in it already.
-- KEYS[1] stock, KEYS[2] pending, KEYS[3] queued, KEYS[4] gen, KEYS[5] returned,
-- KEYS[6] cancelling (see begin_cancel.lua)
-- ARGV[1] expected stock, ARGV[2] new stock, ARGV[3] new generation
-- Returns 1 when corrected, 0 when the item was busy.
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('HLEN', KEYS[2]) == 0 and redis.call('HLEN', KEYS[3]) == 0
    and redis.call('HLEN', KEYS[6]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[4], ARGV[3])
  redis.call('DEL', KEYS[5])
  return 1
end
return 0
