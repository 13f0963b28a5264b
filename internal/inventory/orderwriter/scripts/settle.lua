-- Settle queued orders that are in the database: they are no longer in
-- flight, and their stream entries are done.
-- KEYS[1] queued, KEYS[2] the order stream
-- ARGV[1] consumer group, then pairs: ARGV[2k] entry id, ARGV[2k+1] order no
-- Returns, per pair, 1 when this call settled the order, 0 when it was
-- settled before.
local out = {}
for i = 2, #ARGV, 2 do
  out[#out + 1] = redis.call('HDEL', KEYS[1], ARGV[i + 1])
  redis.call('XACK', KEYS[2], ARGV[1], ARGV[i])
end
return out
