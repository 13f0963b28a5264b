-- A cheap look at one copy, or one bucket, for the reconcile job (probe.go).
-- KEYS[1] stock, KEYS[2] generation, KEYS[3..] hashes of work in flight
-- (reservations, queued orders, cancellations, moves)
-- Returns {stock, or -1 when missing; generation, or ''; entries in flight}.
local n = 0
for i = 3, #KEYS do n = n + redis.call('HLEN', KEYS[i]) end
return {tonumber(redis.call('GET', KEYS[1]) or '-1'), redis.call('GET', KEYS[2]) or '', n}
