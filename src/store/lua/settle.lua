-- Settlements sent on their own (by the settler thread: no admission of their key came to carry them), any
-- number of them, of any keys, in one call; each one is settle_one (settle_one.lua).
-- KEYS: per settlement: acct, res, lease, winv, per
-- ARGV: per settlement: id, cost, tokens used, day/week/month period fields of the admission
-- Returns how many had a reservation to settle.
local done = 0
for i = 0, #KEYS / 5 - 1 do
  local k, a = 5 * i, 6 * i
  local acct = KEYS[k + 1]
  local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight')
  local s = {m(st[1]), m(st[2]), num(st[3])}
  if settle_one(KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], s, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
      ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]) then
    redis.call('HSET', acct, 'spent', ms(s[1]), 'reserved', ms(s[2]), 'inflight', s[3])
    done = done + 1
  end
end
return done
