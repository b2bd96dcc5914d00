-- Deletes the record KEYS[1] if it expired at or before ARGV[1] (the engine's now). Returns 1
-- or 0. Keys that are not shaped like a record (another type, other fields) are left alone.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return 0
end
local held = redis.call('HMGET', KEYS[1], 'state', 'expires_at')
if (held[1] == 'in_flight' or held[1] == 'completed') and held[2]
    and tonumber(held[2]) <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
