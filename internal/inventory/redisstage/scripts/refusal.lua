-- Why a buy cannot take units from the item's Redis copy now, read-only.
-- It is a chunk of other scripts, not a script of its own: reserve.lua and
-- enqueue.lua call it before they take units, and the Idempotency-Key claim
-- calls it (through refuse.lua) before it claims a key never used.
-- keys[1] stock, keys[2] buyers (a set), keys[3] pending reservations (a
-- hash), keys[4] orders queued by redis-stream and not yet written (a hash),
-- window: the item's sale window (a hash of opens and closes, in Unix ms;
-- absent or without a field: no bound on that side)
-- args[1] user, args[2] quantity
-- Returns -2 not loaded, -6 not open yet (and the ms until the opening),
-- -7 closed, -3 already bought, -1 sold out (and the ms until the closing,
-- when the window closes), -4 sold out for now (reserved or queued units
-- may still be given back), or false when the units are there.
--
-- The window is checked first, on Redis's clock (TIME), never the
-- instance's: an instance whose clock runs fast must not sell early.
local function refusal(keys, args, window)
  local stock = redis.call('GET', keys[1])
  if not stock then return -2 end
  local bounds = redis.call('HMGET', window, 'opens', 'closes')
  local closesIn = false
  if bounds[1] or bounds[2] then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if bounds[1] and now < tonumber(bounds[1]) then return -6, tonumber(bounds[1]) - now end
    if bounds[2] then
      closesIn = tonumber(bounds[2]) - now
      if closesIn <= 0 then return -7 end
    end
  end
  if redis.call('SISMEMBER', keys[2], args[1]) == 1 then return -3 end
  if tonumber(stock) < tonumber(args[2]) then
    if redis.call('HLEN', keys[3]) > 0 or redis.call('HLEN', keys[4]) > 0 then return -4 end
    return -1, closesIn
  end
  return false
end
