-- Accept an order of the redis-stream stage: check the stock and the
-- buyer, take the units, record the buyer, and queue the order for the
-- writers. Every key shares the item's hash tag (one Cluster slot). A
-- chunk, after refusal.lua: answer.lua runs it as the stage's script, and
-- fold.lua inside the Idempotency-Key claim's script (see Fold).
-- keys[1] stock, keys[2] buyers, keys[3] pending (redis-atomic's
-- reservations), keys[4] queued (orders accepted, not yet written),
-- keys[5] the order stream, keys[6] the sale window (see refusal.lua),
-- keys[7] the set of items with queued orders (stream_work.go)
-- args[1] user, args[2] quantity, args[3] order no, args[4] now in ms,
-- args[5] stage, args[6] instance, args[7] most entries the stream may
-- hold, args[8] the item's id
-- Returns the stock left, or -1 sold out, -2 not loaded, -3 already
-- bought, -4 sold out for now (units in flight may still come back), -5
-- the queue is full, -6 not open yet, -7 closed, with refusal's ms. The
-- window is checked here, once: the writers that take the order from the
-- stream do not check it again.
local function take_units(keys, args)
  local refused, ms = refusal(keys, args, keys[6])
  if refused then return refused, ms end
  if redis.call('XLEN', keys[5]) >= tonumber(args[7]) then return -5 end
  local left = redis.call('DECRBY', keys[1], tonumber(args[2]))
  redis.call('SADD', keys[2], args[1])
  redis.call('HSET', keys[4], args[3], args[2] .. '|' .. args[4] .. '|' .. args[1])
  redis.call('XADD', keys[5], '*', 'no', args[3], 'user', args[1], 'qty', args[2],
    'at', args[4], 'stage', args[5], 'instance', args[6])
  -- In the same step: a writer that finds the stream drained takes the
  -- item out again in one step too (drained.lua), so no order is queued
  -- while its item is out of the set.
  redis.call('SADD', keys[7], args[8])
  return left
end
