-- Obtain a fair lock: granted only to the first in line (or to anyone when
-- nobody waits), or re-entered by the owner that holds it.
-- KEYS[1] the lock, KEYS[2] the fence, KEYS[3] the waiting record (see
--         obtain.lua; here it names the first in line), KEYS[4] the line,
--         KEYS[5] the leases (see fair_queue.lua), KEYS[6] the try's
--         record (see obtain.lua)
-- ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] '1' if the owner may re-enter,
-- ARGV[4] '1' if the caller waits (joins the line, or renews its place,
-- when not granted), ARGV[5] fencing TTL in ms ('0': none, and the fence
-- is not written), ARGV[6] the waiting
-- record's TTL in ms, ARGV[7] the waiter's id (one per Obtain), ARGV[8] a
-- place's lease in ms, ARGV[9] the TTL in ms of a reentrant try's record
-- Returns the fencing token (>= 1) when obtained; otherwise -1 - the time
-- in ms after which trying again may help (the holder's remaining TTL, or
-- the end of the lease of the waiter first in line while the lock is
-- free), clamped at 0: always <= -1, as obtain.lua.
local line, leases, me = KEYS[4], KEYS[5], ARGV[7]
local got = redis.call('MGET', KEYS[1], KEYS[2], KEYS[6])
local v, f = got[1], got[2]
if got[3] then
  -- Its owner has given up, and the clean-up removed its place too: a
  -- late try neither grants nor queues.
  return -1
end
-- entered records the hold a reentrant try added (see obtain.lua).
local function entered(token)
  if ARGV[3] == '1' then
    redis.call('SET', KEYS[6], token, 'PX', ARGV[9])
  end
  return tonumber(token)
end
local held = not isFree(v)
if held and ARGV[3] == '1' then
  local owner, token, holds, w = string.match(v, '^(.*)|(%d+)|(%d+)(w?)$')
  if not owner then
    return redis.error_reply('lock: unexpected value at ' .. KEYS[1])
  end
  if owner == ARGV[1] then
    -- A re-entry never queues: the line may be waiting for this hold.
    local ttl = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
    if redis.call('SET', KEYS[1], owner .. '|' .. token .. '|' .. (tonumber(holds) + 1) .. w, 'PX', ttl, 'XX') then
      return entered(token)
    end
    return -1
  end
end

local now, us = clock()
prune(line, leases, now)
local head, till = liveHead(line, leases, now)

if not held and (not head or head == me) then
  local last = 0
  if f then
    if string.byte(f, -1) == 119 then
      f = string.sub(f, 1, -2)
    end
    last = tonumber(f)
    if not last then
      return redis.error_reply('lock: unexpected value at ' .. KEYS[2])
    end
  end
  if v then
    last = math.max(last, tonumber(string.match(v, '^|(%d+)|') or 0))
  end
  -- The token as obtain.lua makes it, from the same clock reading.
  local token = us
  if token <= last then
    token = last + 1
  end
  token = string.format('%.0f', token)
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token .. '|1', 'PX', ARGV[2])
  if ARGV[5] ~= '0' then -- '0': a lock without a fence record (obtain.lua)
    redis.call('SET', KEYS[2], token, 'PX', ARGV[5])
  end
  if head then
    redis.call('ZREM', line, me)
    redis.call('ZREM', leases, me)
    point(KEYS[3], (liveHead(line, leases, now)), ARGV[6])
  end
  return entered(token)
end

if ARGV[4] == '1' then
  if not redis.call('ZSCORE', line, me) then
    -- A newcomer, or a waiter dropped while it was away: the end of the
    -- line either way.
    local tail = redis.call('ZRANGE', line, -1, -1, 'WITHSCORES')
    redis.call('ZADD', line, (tonumber(tail[2]) or 0) + 1, me)
  end
  local lease = now + tonumber(ARGV[8])
  redis.call('ZADD', leases, lease, me)
  -- Both sets outlive every place in them, and no longer.
  redis.call('PEXPIRE', line, ARGV[8])
  redis.call('PEXPIRE', leases, ARGV[8])
  if not head then
    head, till = me, lease
  end
  point(KEYS[3], head, ARGV[6])
end

if held then
  return -1 - math.max(redis.call('PTTL', KEYS[1]), 0)
end
-- Free, but another stands first: wake it (its wake-up may have gone to a
-- waiter that has died since, or been lost), and look again when its lease
-- ends, in case it is gone for good.
redis.call('PUBLISH', KEYS[1] .. ':wake', head)
return -1 - math.max(till - now, 0)
