-- A reservation given back whole: the request ends without a usage record (nothing is charged; its token
-- estimate leaves the tpm window).
-- KEYS: 1 acct, 2 res, 3 lease, 4 winv. ARGV: 1 id
local acct, res, id = KEYS[1], KEYS[2], ARGV[1]
local e = redis.call('HGET', res, id)
-- Settled: the settlement counted its cost and real tokens, nothing is left to give back.
if e == 's' then return 1 end
if e == 'd' then
  -- Given back already: the marker goes, so that the request is not held again.
  redis.call('HDEL', res, id)
  redis.call('ZREM', KEYS[3], id)
elseif live(e) then
  local c, _, slot = entry(e)
  local st = redis.call('HMGET', acct, 'reserved', 'inflight')
  local reserved, inflight = msub(m(st[1]), m(c)), num(st[2])
  inflight = math.max(inflight - tonumber(slot), 0)
  redis.call('HSET', acct, 'reserved', ms(reserved), 'inflight', inflight)
  redis.call('HDEL', res, id)
  redis.call('ZREM', KEYS[3], id)
end
local est = redis.call('HGET', KEYS[4], id)
if est then
  redis.call('HINCRBY', KEYS[4], '_total', -tonumber(est))
  redis.call('HSET', KEYS[4], id, 0)
end
return 1
