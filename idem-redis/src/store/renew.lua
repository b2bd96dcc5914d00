-- Moves the lease of the in-flight record KEYS[1] to ARGV[2] if token ARGV[1] still owns it.
-- Returns 1 or 0. A field write keeps the key's expiry: the record still goes at expires_at.
local held = redis.call('HMGET', KEYS[1], 'state', 'token')
if held[1] ~= 'in_flight' or held[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'lease_until', ARGV[2])
return 1
