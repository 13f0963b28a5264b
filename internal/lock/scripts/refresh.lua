-- Extend a lock, but only for its owner, and never shorten it (a re-entered
-- lock is renewed by every hold; the longest ttl must win).
-- KEYS[1] lock hash
-- ARGV[1] owner, ARGV[2] fencing token ('' = any token of this owner),
-- ARGV[3] ttl in ms
-- Returns 1 when extended, 0 when not the owner.
local v = redis.call('HMGET', KEYS[1], 'o', 't')
if v[1] ~= ARGV[1] or (ARGV[2] ~= '' and v[2] ~= ARGV[2]) then
  return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
