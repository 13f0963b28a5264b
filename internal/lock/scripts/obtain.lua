-- Obtain a lock, or re-enter it for the same owner.
-- KEYS[1] the lock: "owner|token|holds" while held; "|token|0" once released,
--         kept for the fencing TTL so the next token can be larger. Either
--         may end in 'w': someone has waited for this lock, so its release
--         must publish a wake-up. A new holder inherits the mark, since
--         other waiters may still be queued; it goes when the record does.
-- ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] '1' if the owner may re-enter,
-- ARGV[4] '1' if the caller will wait for a release when the lock is held
-- Returns the fencing token (> 0) when obtained; when another owner holds
-- the lock, -1 - its remaining ttl in ms (so always < 0). One integer, not a
-- table: the reply is on every obtain's path.
local v = redis.call('GET', KEYS[1])
local last, mark = 0, ''
if v then
  if string.byte(v, 1) ~= 124 then -- held: v does not start with '|'
    if ARGV[3] == '1' then
      local owner, token, holds, w = string.match(v, '^(.*)|(%d+)|(%d+)(w?)$')
      if not owner then
        return redis.error_reply('lock: unexpected value at ' .. KEYS[1])
      end
      if owner == ARGV[1] then
        local ttl = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
        redis.call('SET', KEYS[1], owner .. '|' .. token .. '|' .. (tonumber(holds) + 1) .. w, 'PX', ttl)
        return tonumber(token)
      end
    end
    if ARGV[4] == '1' and string.byte(v, -1) ~= 119 then -- not yet marked 'w'
      redis.call('SET', KEYS[1], v .. 'w', 'KEEPTTL')
    end
    return -1 - redis.call('PTTL', KEYS[1])
  end
  -- released: "|token|0", perhaps marked
  if string.byte(v, -1) == 119 then
    mark = 'w'
    v = string.sub(v, 1, -2)
  end
  last = tonumber(string.sub(v, 2, -3))
  if not last then
    return redis.error_reply('lock: unexpected value at ' .. KEYS[1])
  end
end

-- The token is the larger of "last token + 1" and the server clock in
-- microseconds: it keeps rising when the record of the last one is gone, and
-- tokens from independent servers (RedLock) stay comparable.
local now = redis.call('TIME')
local token = now[1] * 1000000 + now[2]
if token <= last then
  token = last + 1
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. string.format('%.0f', token) .. '|1' .. mark, 'PX', ARGV[2])
return token
