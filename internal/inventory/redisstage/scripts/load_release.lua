-- Release the guard of a first load (first_load.go), if it is still ours.
-- KEYS[1] the guard; ARGV[1] the token that took it.
-- Returns 1 when released, 0 when it had expired or another loader took it.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
