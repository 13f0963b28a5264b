-- Mark an item's buckets changed, for every instance's sweeper
-- (redis-sharded). Run as its own command after the change, never inside
-- a bucket script: on a Cluster the buckets live on other shards. Each
-- mark takes a number never given before, so a sweeper that read an older
-- mark cannot clear this one (see sweep_clear.lua).
-- KEYS[1] the kind's changed items (a hash: item id -> mark), KEYS[2] the
-- kind's mark sequence; both share one hash tag.
-- ARGV[1] the item id
local mark = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], mark)
return mark
