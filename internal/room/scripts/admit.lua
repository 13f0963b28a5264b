-- One admission step of a room, on the room's clock (Redis TIME). Any
-- instance may run it at any time: the places it admits follow the time
-- since the last step, so instances stepping at once do not admit more.
-- KEYS[1] the room's hash, KEYS[2] its admission steps (zset: score the
-- admitted count after the step, member "count:ms"), KEYS[3] its spent
-- places (zset), KEYS[4] the Idempotency-Key each was spent with (hash).
-- ARGV[1] sold out: "1", "0", or "-1" when the caller does not know;
-- ARGV[2] a random seed for the draw; ARGV[3] the news channel;
-- ARGV[4] the item's name in the news; ARGV[5] an id the instances hearing
-- the news acknowledge it under, when the room is sold out ("-": none).
-- Returns {1, epoch, admitted, next, drawn, seed, sold_out, now_ms,
-- expired, spent, max, rate, shuffle_ms, pass_ms, opens_ms, admitted by
-- this step, expired unspent by this step, subscribers asked to
-- acknowledge (-1: none asked)} or {-1, removed} when the room is gone:
-- removed is the instant of its removal (remove.lua), 0 when Redis holds
-- nothing of it (lost with its data, or never set).
local h = KEYS[1]
-- A removed room leaves a tombstone (a hash without an epoch), see remove.lua.
if redis.call('HEXISTS', h, 'epoch') == 0 then
  return {-1, tonumber(redis.call('HGET', h, 'removed') or '0')}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HMGET', h, 'epoch', 'rate', 'max', 'shuffle_ms', 'pass_ms', 'opens_ms',
  'next', 'drawn', 'seed', 'admitted', 'last_ms', 'expired', 'sold_out')
local rate, max, shuffle, passms, opens = tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), tonumber(f[6])
local nxt, drawn, seed, a, last, expired, so = tonumber(f[7]), tonumber(f[8]), tonumber(f[9]), tonumber(f[10]), tonumber(f[11]), tonumber(f[12]), tonumber(f[13])
local changed = false
if ARGV[1] ~= '-1' and tonumber(ARGV[1]) ~= so then
  so = tonumber(ARGV[1])
  changed = true
end
if drawn < 0 and now >= opens + shuffle then
  drawn, seed = nxt, tonumber(ARGV[2])
  changed = true
end
-- Places whose passes ran out free their room.
local steps = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. expired, '+inf', 'LIMIT', 0, 100)
local wasExpired, wasAdmitted, spentGone = expired, a, 0
for _, m in ipairs(steps) do
  local upto, ms = string.match(m, '^(%d+):(%d+)$')
  if tonumber(ms) + passms > now then break end
  expired = tonumber(upto)
  redis.call('ZREM', KEYS[2], m)
end
if expired ~= wasExpired then
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', expired)
  spentGone = #gone
  for i = 1, #gone, 500 do
    redis.call('HDEL', KEYS[4], unpack(gone, i, math.min(i + 499, #gone)))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', expired)
  changed = true
end
local spent = redis.call('ZCARD', KEYS[3])
local cap = math.min(expired + spent + max, nxt)
if drawn >= 0 and so ~= 1 and a < cap then
  local credit = math.floor((now - last) * rate / 1000)
  if credit > 0 then
    local na = math.min(a + credit, cap)
    if na == cap then
      last = now
    else
      last = last + math.floor((na - a) * 1000 / rate)
    end
    a = na
    redis.call('ZADD', KEYS[2], a, a .. ':' .. now)
    changed = true
  end
else
  last = now
end
redis.call('HSET', h, 'admitted', a, 'last_ms', last, 'expired', expired, 'drawn', drawn, 'seed', seed, 'sold_out', so)
local ack, asked = ARGV[5] or '-', -1
if so ~= 1 then ack = '-' end
if changed or ack ~= '-' then
  local n = redis.call('PUBLISH', ARGV[3], table.concat({ARGV[4], f[1], a, nxt, drawn, seed, so, now, expired, ack}, ' '))
  if ack ~= '-' then asked = n end
end
return {1, tonumber(f[1]), a, nxt, drawn, seed, so, now, expired, spent, max, rate, shuffle, passms, opens,
  a - wasAdmitted, expired - wasExpired - spentGone, asked}
