-- The store's format: the newest layout of the store's data (and of what its scripts read) that an
-- instance sharing it writes. Each instance, joining, raises it to its own and learns what it was: an
-- instance older than the store's format would misread what newer scripts write (an allotment's several
-- slots in one reservation, say), and refuses to start.
-- KEYS: 1 the format. ARGV: 1 this instance's format. Returns what the store's format was (0: none, a store
-- set up or last joined by a version from before formats).
local was = tonumber(redis.call('GET', KEYS[1])) or 0
local mine = tonumber(ARGV[1])
if was < mine then redis.call('SET', KEYS[1], mine) end
return was
