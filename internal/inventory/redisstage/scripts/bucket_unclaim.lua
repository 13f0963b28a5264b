-- Forget a buyer in its home bucket (redis-sharded), unless a reservation
-- of the buyer's is still in flight there: a run that ended without an
-- order forgets the buyer only if no other run of the buyer's left units
-- reserved. One whose reply was lost as the bucket's master died leaves
-- both the record and the reservation; the buyer's retry takes the
-- reservation over under the record (bucket_take_over.lua), and the
-- reconcile job, when it gives the reservation back, forgets the buyer.
-- Reads the reservations in flight, so it runs only when a buy fails or
-- is refused, never on a sale.
-- KEYS[1] the home bucket's buyers, KEYS[2] its reservations in flight
-- ARGV[1] user
-- Returns 1 when the buyer was forgotten, 0 otherwise.
local all = redis.call('HGETALL', KEYS[2])
for i = 2, #all, 2 do
  if string.match(all[i], '^%d+|%d+|(.*)$') == ARGV[1] then return 0 end
end
return redis.call('SREM', KEYS[1], ARGV[1])
