-- Give back one hold; delete the lock and wake waiters when none is left.
-- KEYS[1] lock hash
-- ARGV[1] owner, ARGV[2] fencing token ('' = any token of this owner),
-- ARGV[3] wake-up channel
-- Returns 0 when deleted, 1 when holds remain, -1 when not the owner.
local v = redis.call('HMGET', KEYS[1], 'o', 't')
if v[1] ~= ARGV[1] or (ARGV[2] ~= '' and v[2] ~= ARGV[2]) then
  return -1
end
if redis.call('HINCRBY', KEYS[1], 'n', -1) > 0 then
  return 1
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], '1')
return 0
