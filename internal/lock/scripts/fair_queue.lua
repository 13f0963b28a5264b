-- The queue of a fair lock (shared by fair_obtain.lua and fair_leave.lua,
-- which the package prefixes with this file).
-- Two sorted sets hold it, both under the lock's hash tag:
--   the line, PREFIX{key}:queue: waiter id -> arrival number (1, 2, ...)
--   the leases, PREFIX{key}:queue:until: waiter id -> the Redis time (ms)
--     after which the waiter counts as gone unless it renewed its place.
-- A waiter renews its place with every try; one that stops (a killed or
-- paused process, a lost client) is dropped once its lease ends, wherever
-- it stands, so it can hold the line up for at most one lease.

-- clock reads Redis's clock once: in milliseconds, for the leases, and in
-- microseconds, for a fencing token (see obtain.lua).
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

-- prune drops waiters whose lease has ended, at most 100 a call (a
-- script must stay short); liveHead checks the head itself, so those
-- left for later never stand first.
local function prune(line, leases, now)
  local gone = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, 100)
  if #gone > 0 then
    redis.call('ZREM', leases, unpack(gone))
    redis.call('ZREM', line, unpack(gone))
  end
end

-- liveHead returns the first waiter in line whose lease runs, and its
-- lease's end; it drops the dead ones it passes.
local function liveHead(line, leases, now)
  while true do
    local first = redis.call('ZRANGE', line, 0, 0)[1]
    if not first then
      return nil, nil
    end
    local till = tonumber(redis.call('ZSCORE', leases, first))
    if till and till > now then
      return first, till
    end
    redis.call('ZREM', line, first)
    redis.call('ZREM', leases, first)
  end
end

-- isFree reports a lock value that nobody holds: absent, or the
-- "|token|0" of a version before the fence record.
local function isFree(v)
  return not v or string.byte(v, 1) == 124
end

-- point makes the waiting record (see obtain.lua) name the first in line,
-- so that a release wakes that waiter and no other; with nobody in line
-- it is deleted.
local function point(waiting, head, ttl)
  if head then
    redis.call('SET', waiting, head, 'PX', ttl)
  else
    redis.call('DEL', waiting)
  end
end
