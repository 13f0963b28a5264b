-- Put in front of bucket_take.lua for a buyer found recorded in its home
-- bucket while it holds no order (RedisSharded.recordHolds): a run of the
-- buyer's that ended without an order, its reply lost as the bucket's
-- master died, may have left a reservation here too. One of the buyer's
-- own for as many units is taken over under the new order no, rather than
-- left for the reconcile job while the buyer takes units again: otherwise
-- the bucket takes the units anew (bucket_take.lua, without the buyers
-- set). Every key is the home bucket's: one Cluster slot.
-- KEYS and ARGV as bucket_take.lua's, without KEYS[3].
do
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local units, user = string.match(all[i + 1], '^(%d+)|%d+|(.*)$')
    if user == ARGV[1] and tonumber(units) == tonumber(ARGV[2]) then
      redis.call('HDEL', KEYS[2], all[i])
      redis.call('HSET', KEYS[2], ARGV[3], units .. '|' .. ARGV[4] .. '|' .. ARGV[1])
      return {tonumber(units), 0}
    end
  end
end
