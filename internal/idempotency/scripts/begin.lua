-- Claim an Idempotency-Key record for a request, or say why not.
-- KEYS[1] the record
-- ARGV[1] the new claim's token, ARGV[2] the request's fingerprint,
-- ARGV[3] the in-flight lease in ms, ARGV[4] retention in ms
-- KEYS[2...] and ARGV[5...] are the refusal check's (see refuse below)
-- Returns {'claimed', reply} for a key never tried (reply: what refuse
-- answered with its false, or ''), {'retaken'} for a key whose
-- earlier run left its outcome unknown (its lease ran out, or it ended in a
-- timeout), {'inflight'}, {'mismatch'}, {'done', record} with the stored
-- answer, or {'refused', why} when the check refused a key never used.
-- The record outlives the lease (it is kept for the retention period), so
-- a retry after a crash is told apart from a first try.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('GET', KEYS[1])
local reply = ''
if not cur then
  -- A key never used: the request may be refused for good without running
  -- (Store.BeginChecked puts the check's function refuse in front of this
  -- script; Begin's returns false). Nothing is claimed or stored then.
  -- A refuse that does not refuse may have done the request's first step
  -- (Store.BeginChecked: a Refusal that takes); what it answered comes
  -- back with the claim.
  local refused, did = refuse({unpack(KEYS, 2)}, {unpack(ARGV, 5)})
  if refused then return {'refused', refused} end
  reply = did or ''
end
local verdict = 'claimed'
if cur then
  local ok, rec = pcall(cjson.decode, cur)
  if not ok or type(rec) ~= 'table' then return redis.error_reply('corrupt idempotency record') end
  if rec.fp ~= ARGV[2] then return {'mismatch'} end
  if rec.response then return {'done', cur} end
  if not rec.tried and (not rec.lease_until or rec.lease_until > now) then return {'inflight'} end
  verdict = 'retaken'
end
local marker = cjson.encode({token = ARGV[1], fp = ARGV[2], lease_until = now + tonumber(ARGV[3])})
redis.call('SET', KEYS[1], marker, 'PX', ARGV[4])
return {verdict, reply}
