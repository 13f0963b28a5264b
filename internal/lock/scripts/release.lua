-- Give back one hold; free the lock and wake waiters when none is left.
-- KEYS[1] the lock (see obtain.lua)
-- ARGV[1] owner, ARGV[2] fencing token ('' = any token of this owner),
-- ARGV[3] wake-up channel, ARGV[4] fencing TTL in ms
-- Returns 0 when freed, 1 when holds remain, -1 when not the owner.
local v = redis.call('GET', KEYS[1])
if not v then
  return -1
end
local owner, token, holds = string.match(v, '^(.*)|(%d+)|(%d+)$')
if owner ~= ARGV[1] or (ARGV[2] ~= '' and token ~= ARGV[2]) then
  return -1
end
if tonumber(holds) > 1 then
  redis.call('SET', KEYS[1], owner .. '|' .. token .. '|' .. (tonumber(holds) - 1), 'KEEPTTL')
  return 1
end
-- Keep only the token, so that tokens keep rising; it expires in time.
redis.call('SET', KEYS[1], '|' .. token .. '|0', 'PX', ARGV[4])
redis.call('PUBLISH', ARGV[3], '1')
return 0
