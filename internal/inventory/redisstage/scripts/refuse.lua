-- The refusal check of an Idempotency-Key claim (idempotency.Refusal),
-- after refusal.lua: a buy that would be refused (sold out, for good or for
-- now, or a buyer who already bought) is refused before a key never used is
-- claimed, so it costs one round trip and leaves nothing under the key.
-- keys and args as refusal's, keys[5] the sale window. Outside the
-- window: 'sale-not-open:<ms until the opening>' or 'sale-closed', in the
-- precedence of refusal.lua. Sold out: 'sold-out', or 'sold-out:<ms until
-- the closing>' when the sale closes (a sell-out is remembered until then).
-- Sold out while reserved or queued units may still come back:
-- 'sold-out-for-now', which nobody remembers.
-- The ms are written with %d: Lua writes a number of 1e14 or more (a
-- window bound past the year 5000, as a 'never' of 9999-12-31) as 2.5e+14,
-- which RefusalError cannot read.
local function refuse(keys, args)
  local refused, ms = refusal(keys, args, keys[5])
  if refused == -6 then return 'sale-not-open:' .. string.format('%d', ms) end
  if refused == -7 then return 'sale-closed' end
  if refused == -1 then
    if ms then return 'sold-out:' .. string.format('%d', ms) end
    return 'sold-out'
  end
  if refused == -4 then return 'sold-out-for-now' end
  if refused == -3 then return 'already-purchased' end
  return false
end
