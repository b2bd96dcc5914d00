-- Forgets the record KEYS[1] for an operator: deletes it, unless (without force) an owner may
-- still be running under a live lease.
--
-- ARGV: 1 now (the engine's clock), 2 force ('1' or '0'), 3.. the fields to report (HMGET).
-- Returns {'absent'}, {'not_a_hash'} (a key of another type under a record's name: left alone),
-- {'leased', fields} (nothing deleted) or {'deleted', fields} (the fields as they were).
local key, now = KEYS[1], tonumber(ARGV[1])
local kind = redis.call('TYPE', key).ok
if kind == 'none' then
  return {'absent'}
end
if kind ~= 'hash' then
  return {'not_a_hash'}
end
local fields = redis.call('HMGET', key, unpack(ARGV, 3))
if ARGV[2] ~= '1' then
  local held = redis.call('HMGET', key, 'state', 'expires_at', 'lease_until')
  local expires_at, lease_until = tonumber(held[2]), tonumber(held[3])
  local leased
  if held[1] == 'completed' then
    leased = false
  elseif held[1] ~= 'in_flight' or not expires_at or not lease_until then
    -- Not readable as a record: only a forced forget deletes it.
    leased = true
  else
    leased = expires_at > now and lease_until > now
  end
  if leased then
    return {'leased', fields}
  end
end
redis.call('DEL', key)
return {'deleted', fields}
