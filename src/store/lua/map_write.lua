-- A versioned map changed only if nobody changed it since it was read (compare and set).
-- KEYS: 1 version, 2 hash. ARGV: 1 the version read, 2 n, then n field/value pairs to set, then fields to delete.
-- Returns the new version, or 0 when the map changed in between.
local v = redis.call('GET', KEYS[1]) or '0'
if v ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[2])
for i = 0, n - 1 do
  redis.call('HSET', KEYS[2], ARGV[3 + 2 * i], ARGV[4 + 2 * i])
end
for i = 3 + 2 * n, #ARGV do
  redis.call('HDEL', KEYS[2], ARGV[i])
end
return redis.call('INCR', KEYS[1])
