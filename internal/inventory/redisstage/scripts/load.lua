-- Load the Redis copy of an item's stock and its buyers.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] queued,
-- KEYS[5] returned, KEYS[6] gen, KEYS[7] failed, KEYS[8] the sale window,
-- KEYS[9] the log of units given back
-- ARGV[1] stock, ARGV[2] '1' to overwrite a copy that exists,
-- ARGV[3] the new copy's generation, ARGV[4] when the sale opens and
-- ARGV[5] when it closes (Unix ms, '' for no bound), ARGV[6..] users
-- Returns 1 when loaded, 0 when a copy existed and was kept.
--
-- A new copy starts a new generation: units that cancelled orders owe to
-- an older copy are not returned to this one, which was read from a
-- database that already has them back.
if ARGV[2] == '0' and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[7], KEYS[8], KEYS[9])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[6], ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[8], 'opens', ARGV[4]) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[8], 'closes', ARGV[5]) end
for i = 6, #ARGV do redis.call('SADD', KEYS[2], ARGV[i]) end
return 1
