-- Obtain a lock, or re-enter it for the same owner.
-- KEYS[1] the lock: "owner|token|holds" while held, with the lease's TTL;
--         deleted on release. (Versions before issue 31 could end it in
--         'w', their mark of a lock someone waited for; it is kept on a
--         re-entry and dropped by the next obtain.)
-- KEYS[2] the fence: the last token issued for the lock, kept for the
--         fencing TTL after every obtain, so that the next token is larger
--         even when a lease expired unreleased. (It may end in 'w' too,
--         written by those versions; the next obtain drops it.)
-- KEYS[3] the waiting record: set for ARGV[6] ms by every try that will
--         wait for a release, so that the release publishes a wake-up
--         (see release.lua) while anyone waits, and not for ever after.
-- KEYS[4] the try's record (optional): its tombstone, set by the clean-up
--         of a try whose outcome was unknown (see release.lua), which Redis
--         may have run before this try, arriving late on another
--         connection. A try that finds it grants nothing, not even a
--         re-entry. A reentrant owner's try (ARGV[3] '1'), whose owner its
--         other tries share, writes its token there for ARGV[7] ms when it
--         adds a hold, so that its clean-up or release gives back that hold
--         and never another of the owner's.
-- ARGV[1] owner (never starts with '|'), ARGV[2] ttl in ms, ARGV[3] '1' if
-- the owner may re-enter, ARGV[4] '1' if the caller will wait for a release
-- when the lock is held, ARGV[5] fencing TTL in ms ('0': no fence record), ARGV[6] the waiting
-- record's TTL in ms, ARGV[7] the TTL in ms of a reentrant try's record
-- Returns the fencing token (>= 1) when obtained; when another owner holds
-- the lock, -1 - its remaining ttl in ms, the ttl clamped at 0, so always
-- <= -1. The sign alone tells the two apart, and 0 is never sent. One
-- integer, not a table: the reply is on every obtain's path.
-- The clamp and the XX writes matter on a server whose clock runs while a
-- script runs (Redis freezes it; an emulator may not): a key MGET saw may be
-- gone by the next call. PTTL then answers -2, and -1 - (-2) would be +1, a
-- grant of token 1 for a lock nobody holds; a KEEPTTL write would bring the
-- key back with no expiry at all.
-- ARGV[5] '0' is a lock without a fence record (Options.Unfenced): the
-- fence is neither read nor written, and the token is the server clock.
local fenced = ARGV[5] ~= '0'
-- One MGET reads the lock, the fence (when fenced) and the tombstone (when
-- there is one).
local v, f, tomb
if fenced then
  local got = redis.call('MGET', KEYS[1], KEYS[2], KEYS[4] or KEYS[1])
  v, f, tomb = got[1], got[2], got[3]
else
  local got = redis.call('MGET', KEYS[1], KEYS[4] or KEYS[1])
  v, tomb = got[1], got[2]
end
if KEYS[4] and tomb then
  return -1 -- its owner has given up: answer "held", which nobody reads
end
-- entered records the hold a reentrant try added (see KEYS[4]).
local function entered(token)
  if ARGV[3] == '1' and KEYS[4] then
    redis.call('SET', KEYS[4], token, 'PX', ARGV[7])
  end
  return tonumber(token)
end
if v and string.byte(v, 1) ~= 124 then -- held
  if ARGV[3] == '1' then
    local owner, token, holds, w = string.match(v, '^(.*)|(%d+)|(%d+)(w?)$')
    if not owner then
      return redis.error_reply('lock: unexpected value at ' .. KEYS[1])
    end
    if owner == ARGV[1] then
      local ttl = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
      if redis.call('SET', KEYS[1], owner .. '|' .. token .. '|' .. (tonumber(holds) + 1) .. w, 'PX', ttl, 'XX') then
        return entered(token)
      end
      return -1 -- the hold expired under the script: try again
    end
  end
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[6])
  end
  return -1 - math.max(redis.call('PTTL', KEYS[1]), 0)
end

local last = 0
if f then
  if string.byte(f, -1) == 119 then -- an older version's mark
    f = string.sub(f, 1, -2)
  end
  last = tonumber(f)
  if not last then
    return redis.error_reply('lock: unexpected value at ' .. KEYS[2])
  end
end
if v then -- "|token|0": a released lock, as versions before the fence kept it
  last = math.max(last, tonumber(string.match(v, '^|(%d+)|') or 0))
end

-- The token is the larger of "last token + 1" and the server clock in
-- microseconds: it keeps rising when the fence is gone, and tokens from
-- independent servers (RedLock) stay roughly comparable.
local now = redis.call('TIME')
local token = now[1] * 1000000 + now[2]
if token <= last then
  token = last + 1
end
token = string.format('%.0f', token)
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token .. '|1', 'PX', ARGV[2])
if fenced then
  redis.call('SET', KEYS[2], token, 'PX', ARGV[5])
end
return entered(token)
