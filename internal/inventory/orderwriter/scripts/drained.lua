-- Take an item out of the set of items with work when its queue is
-- drained: no entry undelivered (none after the group's last delivered
-- one) and none pending. One step, as enqueue.lua's add: an order queued
-- before it is seen here, one queued after it puts the item back.
-- KEYS[1] the order stream, KEYS[2] the set of items with work
-- ARGV[1] consumer group, ARGV[2] the item's id
-- Returns 1 when the item was taken out, 0 when entries are pending,
-- 2 when entries wait undelivered.
local function id_less(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end

local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local delivered, pending = nil, 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f['name'] == ARGV[1] then
      delivered, pending = f['last-delivered-id'], f['pending']
    end
  end
end
if #last > 0 and (delivered == nil or id_less(delivered, last[1][1])) then
  return 2
end
if pending > 0 then return 0 end
redis.call('SREM', KEYS[2], ARGV[2])
return 1
