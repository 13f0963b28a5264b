-- Obtain a lock, or re-enter it for the same owner.
-- KEYS[1] lock hash {o = owner, t = fencing token, n = hold count}
-- KEYS[2] fencing counter (same hash tag as KEYS[1])
-- ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] '1' if the owner may re-enter,
-- ARGV[4] ttl of the fencing counter in ms
-- Returns {1, token} when obtained, {0, remaining ttl in ms} when held by another.
local holder = redis.call('HGET', KEYS[1], 'o')
if holder then
  if ARGV[3] == '1' and holder == ARGV[1] then
    redis.call('HINCRBY', KEYS[1], 'n', 1)
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return {1, tonumber(redis.call('HGET', KEYS[1], 't'))}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end

-- The token is the larger of "last token + 1" and the server clock in
-- microseconds, so it keeps rising even after the counter key is gone.
local now = redis.call('TIME')
local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = tonumber(redis.call('GET', KEYS[2]))
if last and last >= token then
  token = last + 1
end
local t = string.format('%.0f', token)
redis.call('SET', KEYS[2], t, 'PX', ARGV[4])
redis.call('HSET', KEYS[1], 'o', ARGV[1], 't', t, 'n', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}
