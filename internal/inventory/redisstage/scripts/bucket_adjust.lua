-- Correct one bucket's stock (the reconcile job), only if it still holds
-- what the job saw, it is still the generation the job read before the
-- database (a reset reloads the bucket with a new one, even when it puts
-- back the stock seen), and no reservation is in flight in it.
-- KEYS[1] the bucket's stock, KEYS[2] its reservations, KEYS[3] its
-- generation
-- ARGV[1] the stock seen ('-1': no bucket), ARGV[2] the new stock,
-- ARGV[3] the generation read ('' for none)
-- Returns 1 when corrected, 0 when the bucket moved or is busy.
local v = redis.call('GET', KEYS[1]) or '-1'
if v ~= ARGV[1] or (redis.call('GET', KEYS[3]) or '') ~= ARGV[3] or redis.call('HLEN', KEYS[2]) > 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
