-- Reserve units for a buyer of the redis-atomic stage, atomically.
-- KEYS[1] stock, KEYS[2] buyers (a set), KEYS[3] pending reservations (a hash),
-- KEYS[4] orders queued by redis-stream and not yet written (a hash)
-- ARGV[1] user, ARGV[2] quantity, ARGV[3] order no, ARGV[4] now in ms
-- Returns the stock left, -1 sold out, -2 not loaded, -3 already bought,
-- -4 sold out for now (reserved or queued units may still be given back).
local stock = redis.call('GET', KEYS[1])
if not stock then return -2 end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -3 end
local q = tonumber(ARGV[2])
stock = tonumber(stock)
if stock < q then
  if redis.call('HLEN', KEYS[3]) > 0 or redis.call('HLEN', KEYS[4]) > 0 then return -4 end
  return -1
end
redis.call('DECRBY', KEYS[1], q)
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[2] .. '|' .. ARGV[4] .. '|' .. ARGV[1])
return stock - q
