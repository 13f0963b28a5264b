-- One request against a GCRA limit (generic cell rate algorithm), on the
-- Redis clock: every instance of the fleet shares the limit, and none of
-- their clocks matters.
-- KEYS[1]  the limited key's theoretical arrival time (TAT), in µs
-- ARGV[1]  emission interval: µs between requests at the sustained rate
-- ARGV[2]  burst: requests allowed at once, at least 1
-- Returns {1, 0} when allowed, {0, µs to wait} when not.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = (tonumber(ARGV[2]) - 1) * interval
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
local earliest = tat - tolerance
if now < earliest then
  return {0, earliest - now}
end
local next = tat + interval
redis.call('SET', KEYS[1], string.format('%d', next), 'PX', math.ceil((next - now) / 1000) + 1)
return {1, 0}
