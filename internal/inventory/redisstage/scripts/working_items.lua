#!lua flags=no-writes,allow-cross-slot-keys
-- The items with queued orders, on a Cluster: KEYS are the sets of items
-- with work of the slots one master serves (see stream_work.go); returns
-- the members of all of them.
local out = {}
for _, k in ipairs(KEYS) do
  for _, id in ipairs(redis.call('SMEMBERS', k)) do
    out[#out + 1] = id
  end
end
return out
