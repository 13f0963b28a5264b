-- The limit as a gate of another script (Limiter.Gate), after gcra.lua:
-- gate counts one request of each key in keys, in order, with args
-- {interval, burst}, and answers false when every one was allowed, or
-- '<i>:<µs to wait>' for the first one (the i-th key) that was not. The
-- keys counted before it stay counted, as Limiter.Allow's would.
local function gate(keys, args)
  for i, key in ipairs(keys) do
    local r = gcra(key, args[1], args[2])
    if r[1] == 0 then
      return string.format('%d:%d', i, r[2])
    end
  end
  return false
end
