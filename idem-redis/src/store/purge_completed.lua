-- Deletes the record KEYS[1] for an operator's purge, if it is still the completed record the
-- purge read and chose, and still live: the same token and completion time, state `completed`,
-- and expires_at after the engine's now. A record that changed since (deleted, claimed afresh
-- after it expired) is left alone.
--
-- ARGV: 1 token, 2 completed_at ('' for none), 3 now. Returns 1 when deleted, else 0.
local key = KEYS[1]
if redis.call('TYPE', key).ok ~= 'hash' then
  return 0
end
local held = redis.call('HMGET', key, 'state', 'token', 'completed_at', 'expires_at')
local expires_at = tonumber(held[4])
if held[1] ~= 'completed' or held[2] ~= ARGV[1] or tonumber(held[3]) ~= tonumber(ARGV[2])
    or not expires_at or expires_at <= tonumber(ARGV[3]) then
  return 0
end
redis.call('DEL', key)
return 1
