-- Leases of this instance's reservations renewed: KEYS the lease zsets, ARGV[1] the lease in ms, then one
-- reservation id per key. Only reservations still there are renewed (XX).
-- Returns the positions (1-based) of the ids whose lease was not there: given back by another instance's
-- look for dead leases while this one could not renew them (the store was out of its reach).
local deadline = now_ms() + tonumber(ARGV[1])
local gone = {}
for i = 1, #KEYS do
  if redis.call('ZADD', KEYS[i], 'XX', 'CH', deadline, ARGV[i + 1]) == 0
      and not redis.call('ZSCORE', KEYS[i], ARGV[i + 1]) then
    gone[#gone + 1] = i
  end
end
return gone
