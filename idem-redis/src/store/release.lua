-- Deletes the in-flight record KEYS[1] if token ARGV[1] still owns it. Returns 1 or 0.
local held = redis.call('HMGET', KEYS[1], 'state', 'token')
if held[1] ~= 'in_flight' or held[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
