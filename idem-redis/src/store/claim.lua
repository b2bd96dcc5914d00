-- Claims the record KEYS[1] for a new request, or reports the live record that stops the claim.
--
-- ARGV: 1 fingerprint (hex), 2 token, 3 now, 4 lease_until, 5 expires_at, 6 px (milliseconds the
-- key lives: expires_at - now), 7 operation, 8 scope, 9 scope value. Times are the engine's clock
-- in milliseconds since the Unix epoch, compared here, never with Redis's clock; Redis's own
-- expiry (PEXPIRE, relative) only drops the key once the engine no longer sees it.
--
-- Returns {'acquired', owners} (owners > 1: a lapsed lease was taken over),
-- {'in_flight', fingerprint, lease_until} or {'completed', fingerprint, payload, completed_at}
-- (completed_at nil for a record completed before the store kept it).
local key = KEYS[1]
local fingerprint, token, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local held = redis.call('HMGET', key,
  'state', 'expires_at', 'fingerprint', 'token', 'lease_until', 'owners', 'payload', 'created_at',
  'completed_at', 'operation', 'scope', 'scope_value')
local state = held[1]
local owners, created_at = 1, ARGV[3]
local operation, scope, scope_value = ARGV[7], ARGV[8], ARGV[9]
if state and tonumber(held[2]) > now then
  if state == 'completed' then
    return {'completed', held[3], held[7], held[9]}
  end
  if held[4] == token then
    -- This very claim, run again because its reply was lost: it already owns the record.
    return {'acquired', tonumber(held[6])}
  end
  if tonumber(held[5]) > now or held[3] ~= fingerprint then
    return {'in_flight', held[3], held[5]}
  end
  -- The same request, its owner's lease lapsed (a crash): take it over, keeping what the record
  -- says of itself (a record written before the store kept a field takes the claim's).
  owners = tonumber(held[6]) + 1
  created_at = held[8]
  operation, scope, scope_value = held[10] or operation, held[11] or scope, held[12] or scope_value
end
-- Absent, expired, or taken over: a fresh hash, so nothing of a previous life survives. The
-- DEL only when there is something to delete: once a script has written, Redis lets the rest of
-- its writes through even above `maxmemory`, so a fresh claim's first write must be the HSET,
-- which a full Redis under `noeviction` refuses.
if redis.call('EXISTS', key) == 1 then
  redis.call('DEL', key)
end
redis.call('HSET', key,
  'state', 'in_flight', 'fingerprint', fingerprint, 'token', token, 'owners', owners,
  'lease_until', ARGV[4], 'expires_at', ARGV[5], 'operation', operation, 'created_at', created_at,
  'scope', scope, 'scope_value', scope_value)
redis.call('PEXPIRE', key, ARGV[6])
return {'acquired', owners}
