-- Clear an item's mark once a sweep that began after the mark was read has
-- finished (redis-sharded), unless the item was marked again meanwhile: a
-- change that landed during the sweep keeps its mark for the next pass.
-- KEYS[1] the kind's changed items (a hash: item id -> mark)
-- ARGV[1] the item id, ARGV[2] the mark the sweeper read
-- Returns 1 when cleared, 0 when the item was marked again.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
