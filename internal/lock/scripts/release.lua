-- Give back one hold; delete the lock when none is left, and wake a waiter
-- if anyone waits for it (the waiting record, see obtain.lua, or the 'w'
-- mark of an older version's record). The fence record stays: it keeps the
-- last token.
-- KEYS[1] the lock; its wake-up channel is KEYS[1]:wake
-- KEYS[2] the waiting record
-- KEYS[3] (optional) the try's record (see obtain.lua). Without ARGV[4],
--         for a clean-up by owner, whose owner is used by a single try:
--         when the lock is not the owner's, the record is set as a
--         tombstone for ARGV[3] ms, so that the try, if it is still on its
--         way on another connection, grants nothing when it lands. With
--         ARGV[4] '1', for every release of a reentrant owner's hold: the
--         hold given back is the one the try recorded (its token), never
--         another of the owner's; when the try recorded none and ARGV[2] is
--         '' (a clean-up), it has not run, and the record becomes its
--         tombstone.
-- ARGV[1] owner, ARGV[2] fencing token ('' = any token of this owner)
-- Returns 0 when freed, 1 when holds remain, -1 when not the owner.
local token = ARGV[2]
if ARGV[4] == '1' then
  local entry = redis.call('GET', KEYS[3])
  if entry then
    if not tonumber(entry) then
      return -1 -- its tombstone: the try was given up already
    end
    redis.call('DEL', KEYS[3])
    token = entry
  elseif token == '' then
    redis.call('SET', KEYS[3], 'gone', 'PX', ARGV[3])
    return -1
  end
end
local function notOurs()
  if KEYS[3] and ARGV[4] ~= '1' then
    redis.call('SET', KEYS[3], 'gone', 'PX', ARGV[3])
  end
  return -1
end
-- One MGET reads the lock and the waiting record.
local got = redis.call('MGET', KEYS[1], KEYS[2])
local v, waiting = got[1], got[2]
if not v then
  return notOurs()
end
local mark = ''
-- The common case, one hold of a known token, needs no parsing.
if v ~= ARGV[1] .. '|' .. token .. '|1' then
  local owner, held, holds
  owner, held, holds, mark = string.match(v, '^(.*)|(%d+)|(%d+)(w?)$')
  if owner ~= ARGV[1] or (token ~= '' and held ~= token) or holds == '0' then
    return notOurs()
  end
  if holds ~= '1' then
    -- XX: a key that expired under the script (see obtain.lua) must not
    -- come back, with KEEPTTL, as a lock that never expires.
    if not redis.call('SET', KEYS[1], owner .. '|' .. held .. '|' .. (tonumber(holds) - 1) .. mark, 'KEEPTTL', 'XX') then
      return notOurs()
    end
    return 1
  end
end
redis.call('DEL', KEYS[1])
if mark == 'w' or waiting then
  -- The record names whom to wake: '1' for the first waiter of each
  -- client, or in fair mode the waiter first in line (see fair_queue.lua).
  redis.call('PUBLISH', KEYS[1] .. ':wake', waiting or '1')
end
return 0
