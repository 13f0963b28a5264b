#!lua flags=no-writes,allow-cross-slot-keys
-- The items with queued orders, on a Cluster: ARGV are the sets of items
-- with work of the slots one master serves (see stream_work.go), KEYS[1]
-- the first of them, which routes the script; returns the members of all.
local out = {}
for _, k in ipairs(ARGV) do
  for _, id in ipairs(redis.call('SMEMBERS', k)) do
    out[#out + 1] = id
  end
end
return out
