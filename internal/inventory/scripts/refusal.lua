-- Why a buy cannot take units from the item's Redis copy now, read-only.
-- It is a chunk of other scripts, not a script of its own: reserve.lua and
-- enqueue.lua call it before they take units, and the Idempotency-Key claim
-- calls it (through refuse.lua) before it claims a key never used.
-- keys[1] stock, keys[2] buyers (a set), keys[3] pending reservations (a
-- hash), keys[4] orders queued by redis-stream and not yet written (a hash)
-- args[1] user, args[2] quantity
-- Returns -2 not loaded, -3 already bought, -1 sold out, -4 sold out for now
-- (reserved or queued units may still be given back), or false when the
-- units are there.
local function refusal(keys, args)
  local stock = redis.call('GET', keys[1])
  if not stock then return -2 end
  if redis.call('SISMEMBER', keys[2], args[1]) == 1 then return -3 end
  if tonumber(stock) < tonumber(args[2]) then
    if redis.call('HLEN', keys[3]) > 0 or redis.call('HLEN', keys[4]) > 0 then return -4 end
    return -1
  end
  return false
end
