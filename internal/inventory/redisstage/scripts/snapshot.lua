-- Read the Redis stock and the number of units in flight together.
-- KEYS[1] stock, KEYS[2] pending, KEYS[3] queued
-- Returns {stock, or -1 when there is no copy; reservations and queued
-- orders not yet settled}.
local stock = redis.call('GET', KEYS[1])
if not stock then stock = -1 end
return {tonumber(stock), redis.call('HLEN', KEYS[2]) + redis.call('HLEN', KEYS[3])}
