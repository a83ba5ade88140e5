-- Leases of this instance's reservations renewed: KEYS the lease zsets, ARGV[1] the lease in ms, then one
-- reservation id per key. Only reservations still there are renewed (XX).
local deadline = now_ms() + tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', deadline, ARGV[i + 1])
end
return #KEYS
