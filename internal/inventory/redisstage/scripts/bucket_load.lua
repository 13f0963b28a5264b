-- Load one bucket of an item's stock (redis-sharded) and the buyers homed
-- in it.
-- KEYS[1] the bucket's stock, KEYS[2] its reservations, KEYS[3] its buyers,
-- KEYS[4] its log of units given back, KEYS[5] its generation
-- ARGV[1] the bucket's units, ARGV[2] '1' to overwrite a bucket that
-- exists, ARGV[3] the loaded bucket's generation (see bucket_adjust.lua),
-- ARGV[4..] users
-- Returns 1 when loaded, 0 when the bucket existed and was kept.
if ARGV[2] == '0' and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[5], ARGV[3])
for i = 4, #ARGV do redis.call('SADD', KEYS[3], ARGV[i]) end
return 1
