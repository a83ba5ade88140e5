-- The answer cache: one entry stored with its TTL, then the least recently used entries removed until all
-- entries together fit in the cap (`cache_max_mb`). Redis itself runs `noeviction` (balances must never be
-- evicted), so this cap is what bounds the cache there. Entries that expired meanwhile leave the counts when
-- they come first in the order (or when read); they are not counted as evictions.
-- KEYS: 1 entry, 2 lru (zset: fingerprint -> last use ms), 3 meta (hash: fingerprint -> "size|model"),
--       4 bytes (hash: _total and each model -> bytes of its entries)
-- ARGV: 1 fingerprint, 2 the entry, 3 TTL ms, 4 the model, 5 the cap in bytes, 6 the entry key's prefix
--       (an entry's key is the prefix and its fingerprint)
-- Returns {bytes of the model's entries, the model of each entry evicted...}.
local fp, size, model = ARGV[1], #ARGV[2], ARGV[4]
local function forget(f, meta)
  local s, mo = string.match(meta, '^(%d+)|(.*)$')
  redis.call('HDEL', KEYS[3], f)
  if s then
    redis.call('HINCRBY', KEYS[4], '_total', -tonumber(s))
    redis.call('HINCRBY', KEYS[4], mo, -tonumber(s))
  end
  return mo
end
local old = redis.call('HGET', KEYS[3], fp)
if old then forget(fp, old) end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], now_ms(), fp)
redis.call('HSET', KEYS[3], fp, size .. '|' .. model)
redis.call('HINCRBY', KEYS[4], model, size)
local total = redis.call('HINCRBY', KEYS[4], '_total', size)
local cap = tonumber(ARGV[5])
local out = {0}
while total > cap do
  local first = redis.call('ZPOPMIN', KEYS[2])
  if #first == 0 then break end
  local f = first[1]
  local meta = redis.call('HGET', KEYS[3], f)
  if meta then
    local mo = forget(f, meta)
    if redis.call('DEL', ARGV[6] .. f) == 1 and mo then table.insert(out, mo) end
  end
  total = tonumber(redis.call('HGET', KEYS[4], '_total')) or 0
  if f == fp then break end
end
out[1] = tonumber(redis.call('HGET', KEYS[4], model)) or 0
return out
