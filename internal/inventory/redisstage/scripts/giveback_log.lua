-- A chunk for the give-back scripts: log_given_back records units that
-- left the stock for a reservation and came back, so that the lab can tell
-- a buyer refused while they were away from one refused with stock on the
-- shelf (the audit's given_back). One entry per give-back, newest first:
-- 'reserved ms|given back ms|units', both on Redis's clock; the reserved
-- time is the reservation record's second field ('units|ms|user'). The log
-- keeps the newest 1,000 entries and goes with the item's next load.
local function log_given_back(key, rec, units)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local reserved = string.match(rec, '^%d+|(%d+)|') or now
  redis.call('LPUSH', key, reserved .. '|' .. now .. '|' .. units)
  redis.call('LTRIM', key, 0, 999)
end
