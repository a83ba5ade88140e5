-- Settlements sent on their own (by the settler thread: no admission of their key came to carry them), any
-- number of them, of any keys, in one call; each key's in one settle_many (settle_many.lua).
-- KEYS: per settlement: acct, res, lease, winv, per
-- ARGV: per settlement: id, cost, tokens used, day/week/month period fields of the admission, the allotment
--       it was drawn from ('' none)
-- Returns how many had a reservation to settle.
local done = 0
local i, n = 0, #KEYS / 5
while i < n do
  -- The settlements of one key that follow each other are settled together.
  local k = 5 * i
  local acct = KEYS[k + 1]
  local j = i + 1
  while j < n and KEYS[5 * j + 1] == acct do j = j + 1 end
  local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight')
  local s = {m(st[1]), m(st[2]), num(st[3])}
  local settled, delta = settle_many(KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], s, ARGV, 7 * i + 1, j - i)
  if delta ~= 0 then redis.call('HINCRBY', KEYS[k + 4], '_total', delta) end
  if settled > 0 then
    redis.call('HSET', acct, 'spent', ms(s[1]), 'reserved', ms(s[2]), 'inflight', s[3])
    done = done + settled
  end
  i = j
end
return done
