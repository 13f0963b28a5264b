-- claim_slot: claims a slot of the fleet's schedule for this instance's run
-- of one job, unless that slot or a later one was claimed already.
--
-- KEYS[1]: the job's last claimed slot. ARGV[1]: the slot; ARGV[2]: how long
-- the record lives, in ms (far longer than an interval: a record that
-- expired lets only a slot that old run again).
--
-- The last slot, not a marker per slot: a marker that expires lets an
-- instance that was stalled past its life (both cores taken, a paused VM)
-- run the slot a second time. Slots only grow, so one number says which
-- are done, however late the instance that asks.
--
-- Slots are compared as the decimal strings of non-negative integers,
-- never as Lua numbers: a double holds integers exactly only up to 2^53.
--
-- Returns 1 when claimed, 0 when not.
local last, slot = redis.call('GET', KEYS[1]), ARGV[1]
if last and (#last > #slot or (#last == #slot and last >= slot)) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
