-- Leases of this instance's reservations renewed. KEYS: per reservation its lease zset and its res hash;
-- ARGV[1] the lease in ms, then one reservation id per pair of keys. A live entry's lease is renewed. An
-- entry another instance's look for dead leases gave back (the marker 'd': this instance could not renew it
-- in time) is not: its position (1-based) is returned, for `rehold.lua`. A settled one, or one gone (its
-- request released, or its record shipped), has nothing to renew.
local deadline = now_ms() + tonumber(ARGV[1])
local gone = {}
for i = 1, #KEYS / 2 do
  local lease, res, id = KEYS[2 * i - 1], KEYS[2 * i], ARGV[i + 1]
  local e = redis.call('HGET', res, id)
  if e == 'd' then
    gone[#gone + 1] = i
  elseif live(e) then
    redis.call('ZADD', lease, deadline, id)
  end
end
return gone
