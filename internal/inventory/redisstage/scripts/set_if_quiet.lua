-- Correct the Redis stock, only if nothing moved since the snapshot, the
-- copy is still the generation read before the database was, and no
-- reservation, queued order or cancellation is in flight. A reset that
-- reloaded the copy meanwhile gave it a new generation: the database read
-- is older than the copy, even when the reset put back the stock seen. The corrected copy starts a new
-- generation, like a loaded one: it was read from the database, so units
-- owed to the old copy by cancelled orders are in it already.
-- KEYS[1] stock, KEYS[2] pending, KEYS[3] queued, KEYS[4] gen, KEYS[5] returned,
-- KEYS[6] cancelling (see begin_cancel.lua)
-- ARGV[1] expected stock, ARGV[2] new stock, ARGV[3] new generation,
-- ARGV[4] the generation read before the database ('' for none)
-- Returns 1 when corrected, 0 when the item was busy.
if redis.call('GET', KEYS[1]) == ARGV[1] and (redis.call('GET', KEYS[4]) or '') == ARGV[4]
    and redis.call('HLEN', KEYS[2]) == 0 and redis.call('HLEN', KEYS[3]) == 0
    and redis.call('HLEN', KEYS[6]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[4], ARGV[3])
  redis.call('DEL', KEYS[5])
  return 1
end
return 0
