-- Stores the payload of the in-flight record KEYS[1] if token ARGV[1] still owns it.
--
-- ARGV: 1 token, 2 payload, 3 status ('' for none), 4 completed_at, 5 expires_at, 6 px
-- (expires_at - completed_at: a non-positive px deletes the key, which had expired anyway).
-- Returns 1 when written, 0 when the record is gone, completed, or another owner's.
local key = KEYS[1]
local held = redis.call('HMGET', key, 'state', 'token')
if held[1] ~= 'in_flight' or held[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', key,
  'state', 'completed', 'payload', ARGV[2], 'completed_at', ARGV[4], 'expires_at', ARGV[5])
if ARGV[3] ~= '' then
  redis.call('HSET', key, 'status', ARGV[3])
end
redis.call('PEXPIRE', key, ARGV[6])
return 1
