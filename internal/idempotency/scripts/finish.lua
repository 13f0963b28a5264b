-- Settle a claimed Idempotency-Key record: store the response, or drop the
-- record, but only if this claim still owns it (its in-flight lease may have
-- run out and another request may have claimed the key since).
-- KEYS[1] the record
-- ARGV[1] the claim's token, ARGV[2] the response to store ('' deletes the
-- record), ARGV[3] retention in ms
-- KEYS[2...] and ARGV[4...] are also's: work the settle does first, in the
-- same script, whoever owns the record now (Claim.Also; the plain settle's
-- does nothing).
-- Returns 1 when settled, 0 when the record is gone or another claim's.
also({unpack(KEYS, 2)}, {unpack(ARGV, 4)})
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local ok, rec = pcall(cjson.decode, cur)
if not ok or rec.token ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
