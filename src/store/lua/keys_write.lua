-- The key records changed only if nobody changed them since they were read (compare and set), and, in the
-- same atomic step, what admission reads of each key (its terms: credit, own budget, expiry, state), so
-- that admit.lua never judges a key by anything but its record in force.
-- KEYS: 1 keys:ver, 2 keys (hash: name -> record JSON), 3 terms (hash: name -> terms), 4 terms:at (the
--       keys version the terms were last written for)
-- ARGV: 1 the version read, 2 n, then n triples (name, record JSON, terms), then names to delete.
-- Returns the new version, or 0 when the records changed in between.
local v = redis.call('GET', KEYS[1]) or '0'
if v ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[2])
for i = 0, n - 1 do
  local name = ARGV[3 + 3 * i]
  redis.call('HSET', KEYS[2], name, ARGV[4 + 3 * i])
  redis.call('HSET', KEYS[3], name, ARGV[5 + 3 * i])
end
for i = 3 + 3 * n, #ARGV do
  redis.call('HDEL', KEYS[2], ARGV[i])
  redis.call('HDEL', KEYS[3], ARGV[i])
end
local new = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[4], new)
return new
