-- The answer cache: one entry read, and marked used now (its place in the least-recently-used order).
-- An entry that expired is forgotten here: its size leaves the counts.
-- KEYS: 1 entry (string: the answer, with its TTL), 2 lru (zset: fingerprint -> last use ms), 3 meta (hash:
--       fingerprint -> "size|model"), 4 bytes (hash: _total and each model -> bytes of its entries)
-- ARGV: 1 fingerprint
-- Returns {the entry, its model, the bytes of the model's entries}, or false.
local v = redis.call('GET', KEYS[1])
local meta = redis.call('HGET', KEYS[3], ARGV[1])
if v then
  redis.call('ZADD', KEYS[2], 'XX', now_ms(), ARGV[1])
  local model = meta and string.match(meta, '^%d+|(.*)$') or ''
  return {v, model, redis.call('HGET', KEYS[4], model) or '0'}
end
if meta then
  local size, model = string.match(meta, '^(%d+)|(.*)$')
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  if size then
    redis.call('HINCRBY', KEYS[4], '_total', -tonumber(size))
    redis.call('HINCRBY', KEYS[4], model, -tonumber(size))
  end
end
return false
