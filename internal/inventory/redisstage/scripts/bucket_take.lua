-- Take up to the units a buyer wants from one bucket of an item's stock
-- (redis-sharded). Run on the buyer's home bucket first, with its buyers
-- set, which records the buyer in the same step; then, if units are still
-- wanted, on the other buckets, without it. Every key of one bucket shares
-- the bucket's hash tag, so the script touches one Cluster slot.
-- KEYS[1] the bucket's stock, KEYS[2] its reservations in flight (a hash),
-- KEYS[3] (home bucket only) the buyers homed in this bucket (a set)
-- ARGV[1] user, ARGV[2] units wanted, ARGV[3] order no, ARGV[4] now in ms
-- Returns {units taken, code}: code 0; -2 the bucket is not loaded; -3 the
-- buyer already bought (home bucket only); 1 none taken while reservations
-- in flight may still give units back to this bucket.
local stock = redis.call('GET', KEYS[1])
if not stock then return {0, -2} end
if #KEYS == 3 and redis.call('SADD', KEYS[3], ARGV[1]) == 0 then return {0, -3} end
local n = math.min(tonumber(stock), tonumber(ARGV[2]))
if n <= 0 then
  if redis.call('HLEN', KEYS[2]) > 0 then return {0, 1} end
  return {0, 0}
end
redis.call('DECRBY', KEYS[1], n)
redis.call('HSET', KEYS[2], ARGV[3], n .. '|' .. ARGV[4] .. '|' .. ARGV[1])
return {n, 0}
