-- Obtain a lock, or re-enter it for the same owner.
-- KEYS[1] the lock: "owner|token|holds" while held; "|token|0" once released,
--         kept for the fencing TTL so the next token can be larger
-- ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] '1' if the owner may re-enter
-- Returns {1, token} when obtained, {0, remaining ttl in ms} when held by another.
local v = redis.call('GET', KEYS[1])
local last = 0
if v then
  local owner, token, holds = string.match(v, '^(.*)|(%d+)|(%d+)$')
  if not owner then
    return redis.error_reply('lock: unexpected value at ' .. KEYS[1])
  end
  if owner ~= '' then
    if ARGV[3] == '1' and owner == ARGV[1] then
      local ttl = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
      redis.call('SET', KEYS[1], owner .. '|' .. token .. '|' .. (tonumber(holds) + 1), 'PX', ttl)
      return {1, tonumber(token)}
    end
    return {0, redis.call('PTTL', KEYS[1])}
  end
  last = tonumber(token)
end

-- The token is the larger of "last token + 1" and the server clock in
-- microseconds: it keeps rising when the record of the last one is gone, and
-- tokens from independent servers (RedLock) stay comparable.
local now = redis.call('TIME')
local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
if token <= last then
  token = last + 1
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. string.format('%.0f', token) .. '|1', 'PX', ARGV[2])
return {1, token}
