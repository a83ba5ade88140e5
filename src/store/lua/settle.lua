-- Settlements sent on their own (by the settler thread: no admission of their key came to carry them), any
-- number of them, of any keys, in one call; each key's in one settle_many (settle_many.lua).
-- KEYS: per key: acct, res, lease, winv, per
-- ARGV: per key: how many values its settlements take, then those in settle_many's groups (n, the
--       day/week/month period fields of their admission, the allotment they were drawn from ('' none), then
--       n times id, cost, tokens used), then how many ids follow, then the ids of drawn requests whose
--       markers go (their settlements applied and their records shipped: nothing is sent for them again)
-- Returns how many had a reservation to settle.
local done = 0
local at = 1
for k = 0, #KEYS / 5 - 1 do
  local acct = KEYS[5 * k + 1]
  local len = tonumber(ARGV[at])
  local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight')
  local s = {m(st[1]), m(st[2]), num(st[3])}
  local settled, delta = settle_many(KEYS[5 * k + 2], KEYS[5 * k + 3], KEYS[5 * k + 4], KEYS[5 * k + 5], s, ARGV, at + 1, at + 1 + len)
  if delta ~= 0 then redis.call('HINCRBY', KEYS[5 * k + 4], '_total', delta) end
  if settled > 0 then
    redis.call('HSET', acct, 'spent', ms(s[1]), 'reserved', ms(s[2]), 'inflight', s[3])
    done = done + settled
  end
  at = at + 1 + len
  local forget = tonumber(ARGV[at])
  if forget > 0 then redis.call('HDEL', KEYS[5 * k + 2], unpack(ARGV, at + 1, at + forget)) end
  at = at + 1 + forget
end
return done
