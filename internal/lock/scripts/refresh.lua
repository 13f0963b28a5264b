-- Extend a lock, but only for its owner. A re-entered lock is renewed by
-- every hold, so with several holds the longest ttl wins. The fence record
-- is kept alive with it, so that it outlives a lease held past FenceTTL.
-- KEYS[1] the lock (see obtain.lua), KEYS[2] its fence record, KEYS[3]
-- (optional) a reentrant try's record (see obtain.lua), kept for ARGV[5]
-- ms more, so that the hold's release still finds it
-- ARGV[1] owner, ARGV[2] fencing token ('' = any token of this owner),
-- ARGV[3] ttl in ms, ARGV[4] the fence record's ttl in ms ('0': none)
-- Returns 1 when extended, 0 when not the owner.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local owner, token, holds = string.match(v, '^(.*)|(%d+)|(%d+)w?$')
if owner ~= ARGV[1] or (ARGV[2] ~= '' and token ~= ARGV[2]) then
  return 0
end
if ARGV[4] ~= '0' then -- '0': a lock without a fence record
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
if KEYS[3] then
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
if holds ~= '1' and redis.call('PTTL', KEYS[1]) >= tonumber(ARGV[3]) then
  return 1
end
-- PEXPIRE answers 0 for a key that expired under the script (see
-- obtain.lua): that lease is lost, not extended.
return redis.call('PEXPIRE', KEYS[1], ARGV[3])
