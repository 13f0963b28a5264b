-- The stage's own script: take_units (reserve.lua or enqueue.lua, after
-- refusal.lua) on the script's keys. Returns the stock left or a refusal's
-- code, or {code, ms} for a code that comes with a time.
local code, ms = take_units(KEYS, ARGV)
if ms then return {code, ms} end
return code
