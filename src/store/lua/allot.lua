-- An allotment: a slice of a busy key's credit (and budget) and of its concurrency slots that one instance
-- holds in the store under one reservation entry, and admits that key's requests from by itself, without a
-- round trip each (store/allot.rs). This call gives back what the instance no longer needs of it, then
-- takes what it asks for, judged as admission judges (admit.lua): the key's terms (credit, own budget,
-- expiry, state) are the store's. The entry holds, at every moment, what the instance has not drawn yet,
-- the worst cases of the requests drawn and still running, and the costs of the drawn requests whose
-- records are not shipped yet; each shipped record takes its cost out of it (ship.lua) and into the spend.
-- An allotment takes at most half of what is left of the key's credit, budget or slots, so other instances
-- always find room; nothing (and admission asks the store again for each request) when that half is less
-- than the instance's smallest useful slice.
-- KEYS: 1 acct, 2 res, 3 lease, 4 per (the key's budget periods), 5 terms
-- ARGV: 1 the allotment's id, 2 lease ms, 3 the key's name, 4 the group's budget amount ('' none; the key's
--       own wins), 5 its period (d, w or m), 6 now (Unix seconds), 7-9 the day, week and month period
--       fields of now, 10 '1' when the key's requests are held to its balance, 11 max concurrent ('' none),
--       12 '1' when the instance holds the allotment already (then 13 and 14 are given back from it),
--       13 money given back, 14 slots given back, 15 money asked for, 16 slots asked for, 17 the smallest
--       money slice worth taking, 18 '1' to end the allotment: whatever its entry still holds is given back
--       and the entry goes (the instance ends it only when none of its requests runs and every record of
--       them is shipped)
-- Returns {code, money taken, slots taken, spent, credit ('' none), budget amount (''), budget period, spent
--          in the budget period}; code 0 (taken, perhaps nothing), 6 revoked (or unknown to the store),
--          7 expired, 8 the allotment is gone (a look for dead leases gave it back: this instance could not
--          renew it; it takes a new one).
local acct, res, lease, per = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[1]
local credit, bamount, bperiod, expires, state = '', ARGV[4], ARGV[5], '', 'u'
local terms = redis.call('HGET', KEYS[5], ARGV[3])
if terms then
  local c, b, bp, ex, st = string.match(terms, '^(%d*)|(%d*)|(%a?)|(%d*)|(%a)$')
  if st then
    credit, expires, state = c, ex, st
    if b ~= '' then bamount, bperiod = b, bp end
  end
end
if ARGV[10] ~= '1' then credit, bamount = '', '' end
local pfield = ({d = ARGV[7], w = ARGV[8], m = ARGV[9]})[bperiod]
if not pfield then bamount = '' end
local conc = tonumber(ARGV[11])
local now = now_ms()
local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight', 'swept')
local spent, reserved, inflight = m(st[1]), m(st[2]), num(st[3])
-- The dead leases of the key, as admission looks for them (a key whose every instance admits from
-- allotments makes no admission call).
local held_now = {reserved, inflight}
local swept = sweep(res, lease, now, tonumber(ARGV[2]), num(st[4]), held_now)
reserved, inflight = held_now[1], held_now[2]
local pspent = {0, 0}
if bamount ~= '' then pspent = m(redis.call('HGET', per, pfield)) end
local function answer(code, money, slots)
  return {code, ms(money), slots, ms(spent), credit, bamount, bperiod, ms(pspent)}
end

-- What the entry holds now.
local held, slots = {0, 0}, 0
if ARGV[12] == '1' then
  local e = redis.call('HGET', res, id)
  if not live(e) then
    -- Gone; what the look above gave back (perhaps this very entry) is written all the same.
    redis.call('HSET', acct, 'reserved', ms(reserved), 'inflight', inflight, 'swept', swept)
    return answer(8, {0, 0}, 0)
  end
  local c, _, s = entry(e)
  held, slots = m(c), tonumber(s)
  local give = m(ARGV[13])
  local gs = tonumber(ARGV[14])
  if ARGV[18] == '1' then give, gs = held, slots end
  if mlt(held, give) then give = held end
  if gs > slots then gs = slots end
  held = msub(held, give)
  reserved = msub(reserved, give)
  slots = slots - gs
  inflight = inflight - gs
  if inflight < 0 then inflight = 0 end
end

local code = 0
if state ~= 'a' then
  code = 6
elseif expires ~= '' and tonumber(expires) <= tonumber(ARGV[6]) then
  code = 7
end
local money, more = {0, 0}, 0
if code == 0 and ARGV[18] ~= '1' then
  -- Half of what is left of the credit and of the budget, whichever is less.
  local room = nil
  local function left(limit, used)
    local total = madd(used, reserved)
    local r = {0, 0}
    if mlt(total, limit) then r = msub(limit, total) end
    if room == nil or mlt(r, room) then room = r end
  end
  if credit ~= '' then left(m(credit), spent) end
  if bamount ~= '' then left(m(bamount), pspent) end
  local take = true
  if room ~= nil then
    local half = mhalf(room)
    money = m(ARGV[15])
    if mlt(half, money) then money = half end
    take = not mlt(money, m(ARGV[17]))
  end
  if take and conc then
    local free = conc - inflight
    more = tonumber(ARGV[16])
    if more > math.ceil(free / 2) then more = math.ceil(free / 2) end
    if more < 0 then more = 0 end
    -- A slice with no slot admits nothing.
    take = more > 0 or slots > 0
  end
  if not take then money, more = {0, 0}, 0 end
end
held = madd(held, money)
reserved = madd(reserved, money)
slots = slots + more
inflight = inflight + more
if ARGV[18] == '1' or (ARGV[12] ~= '1' and mzero(held) and slots == 0) then
  redis.call('HDEL', res, id)
  redis.call('ZREM', lease, id)
else
  redis.call('HSET', res, id, ms(held) .. ' 0 ' .. slots)
  redis.call('ZADD', lease, now + tonumber(ARGV[2]), id)
end
redis.call('HSET', acct, 'reserved', ms(reserved), 'inflight', inflight, 'swept', swept)
return answer(code, money, more)
