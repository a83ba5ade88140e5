-- Reservations of requests this instance still runs, held again after another instance's look for dead
-- leases gave them back (their lease ran out while the store was out of this instance's reach): the
-- request's worst case, tokens and concurrency slot, under a new lease, as admission held them. Only an
-- entry that is still the marker 'd' is held again: one that is gone (the request's record was shipped and
-- counted its cost, or the request was released) never is, whenever this call runs.
-- KEYS: per reservation: acct, res, lease. ARGV: 1 the lease in ms, then per reservation 4 values: id, cost
-- (worst case), tokens (estimate), slot ('1' when it holds a concurrency slot).
-- Returns how many were held again.
local deadline = now_ms() + tonumber(ARGV[1])
local held = 0
for i = 0, #KEYS / 3 - 1 do
  local acct, res, lease = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local id, cost, tokens, slot = ARGV[4 * i + 2], ARGV[4 * i + 3], ARGV[4 * i + 4], ARGV[4 * i + 5]
  if redis.call('HGET', res, id) == 'd' then
    redis.call('HSET', res, id, cost .. ' ' .. tokens .. ' ' .. slot)
    redis.call('ZADD', lease, deadline, id)
    local st = redis.call('HMGET', acct, 'reserved', 'inflight')
    local reserved, inflight = madd(m(st[1]), m(cost)), num(st[2])
    if slot == '1' then inflight = inflight + 1 end
    redis.call('HSET', acct, 'reserved', ms(reserved), 'inflight', inflight)
    held = held + 1
  end
end
return held
