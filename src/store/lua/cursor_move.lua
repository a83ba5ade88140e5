-- Moves an instance's cursor from the end of one ledger file (or of what retired files held) to the start
-- of the next, only while it is still where the shipper left it (a Redis restored from an older snapshot
-- holds an earlier cursor: its records are shipped again first).
-- KEYS: 1 cursor (hash: offset, fp)
-- ARGV: 1 offset expected, 2 fingerprint expected, 3 new offset, 4 new fingerprint
-- Returns 1 when it moved, 0 when the cursor was elsewhere.
local c = redis.call('HMGET', KEYS[1], 'offset', 'fp')
local off, fp = c[1] or '0', c[2] or ''
if off ~= ARGV[1] or fp ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'offset', ARGV[3], 'fp', ARGV[4])
return 1
