-- One request against a GCRA limit (generic cell rate algorithm), on the
-- Redis clock: every instance of the fleet shares the limit, and none of
-- their clocks matters. The one copy of the algorithm: the limiter's own
-- script (Limiter.Allow) and the scripts that run it first (Limiter.Gate)
-- put their lines after this function.
-- key       the limited key's theoretical arrival time (TAT), in µs
-- interval  emission interval: µs between requests at the sustained rate
-- burst     requests allowed at once, at least 1
-- Returns {1, 0} when allowed, {0, µs to wait} when not.
local function gcra(key, interval, burst)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  interval = tonumber(interval)
  local tolerance = (tonumber(burst) - 1) * interval
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then
    tat = now
  end
  local earliest = tat - tolerance
  if now < earliest then
    return {0, earliest - now}
  end
  local next = tat + interval
  redis.call('SET', key, string.format('%d', next), 'PX', math.ceil((next - now) / 1000) + 1)
  return {1, 0}
end
