-- The stage's script folded into the Idempotency-Key claim's (see Fold in
-- fold.go): the claim calls refuse for a key never used, and claims the
-- key unless it returns a refusal. Here refuse also takes the units
-- (take_units, reserve.lua or enqueue.lua), so a keyed sale costs the
-- claim's one round trip where it cost two. A refusal takes nothing and
-- claims nothing, as refuse.lua's (a sell-out for now too: the stage's own
-- script would only say the same); any other answer claims the key and
-- comes back with the claim as 'took:<left>' or 'code:<code>' (not
-- loaded, a full queue: the stage then runs its own script, which says
-- what to do).
-- The ms are written with %d, as in refuse.lua.
local function refuse(keys, args)
  local code, ms = take_units(keys, args)
  if code == -6 then return 'sale-not-open:' .. string.format('%d', ms) end
  if code == -7 then return 'sale-closed' end
  if code == -1 then
    if ms then return 'sold-out:' .. string.format('%d', ms) end
    return 'sold-out'
  end
  if code == -4 then return 'sold-out-for-now' end
  if code == -3 then return 'already-purchased' end
  if code < 0 then return false, 'code:' .. code end
  return false, 'took:' .. code
end
