-- The end of one request, sent from the request path: the shared twin of Reservation::settle. Its actual
-- cost counts (in all, and in the budget periods of its admission), its reservation and concurrency slot are
-- given back, its tokens in the tpm window become the real ones, and its entry becomes the marker 's', so
-- that its record, when shipped (ship.lua), does not count the cost again.
-- KEYS: 1 acct, 2 res, 3 lease, 4 winv, 5 per
-- ARGV: 1 id, 2 cost, 3 tokens used, 4-6 day/week/month period fields of the admission
-- Returns 1, or 0 when there was no reservation to settle (the record then settles it when shipped).
local acct, res, id = KEYS[1], KEYS[2], ARGV[1]
local e = redis.call('HGET', res, id)
if not e or e == 's' then return 0 end
local c, _, slot = entry(e)
local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight')
local spent, reserved, inflight = m(st[1]), m(st[2]), num(st[3])
reserved = msub(reserved, m(c))
if slot == '1' and inflight > 0 then inflight = inflight - 1 end
local cost = m(ARGV[2])
spent = madd(spent, cost)
redis.call('HSET', acct, 'spent', ms(spent), 'reserved', ms(reserved), 'inflight', inflight)
if not mzero(cost) then
  for i = 4, 6 do
    redis.call('HSET', KEYS[5], ARGV[i], ms(madd(m(redis.call('HGET', KEYS[5], ARGV[i])), cost)))
  end
end
local est = redis.call('HGET', KEYS[4], id)
if est then
  local delta = tonumber(ARGV[3]) - tonumber(est)
  if delta ~= 0 then
    redis.call('HINCRBY', KEYS[4], '_total', delta)
    redis.call('HSET', KEYS[4], id, ARGV[3])
  end
end
redis.call('HSET', res, id, 's')
redis.call('ZREM', KEYS[3], id)
return 1
