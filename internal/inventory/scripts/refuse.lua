-- The refusal check of an Idempotency-Key claim (idempotency.Refusal),
-- after refusal.lua: a buy that would be refused for good (sold out, or a buyer
-- who already bought) is refused before a key never used is claimed, so it
-- costs one round trip and leaves nothing under the key.
-- keys and args as refusal's.
local function refuse(keys, args)
  local refused = refusal(keys, args)
  if refused == -1 then return 'sold-out' end
  if refused == -3 then return 'already-purchased' end
  return false
end
