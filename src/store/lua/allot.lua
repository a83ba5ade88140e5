-- An allotment: a slice of a busy key's credit (and budget) and of its concurrency slots that one instance
-- holds in the store under one reservation entry, and admits that key's requests from by itself, without a
-- round trip each (store/allot/). This call gives back what the instance no longer needs of it, then
-- takes what it asks for, judged as admission judges (admit.lua): the key's terms (credit, own budget,
-- expiry, state) are the store's. The entry holds, at every moment, what the instance has not drawn yet,
-- the worst cases of the requests drawn and still running, and the costs of the drawn requests that ended
-- and whose settlements have not come yet; each settlement (settle_many.lua), or a record that comes
-- before it (ship.lua), takes its cost out of it and into the spend.
-- An allotment takes at most half of what is left of the key's credit, budget, slots, requests or tokens in
-- the rate window, so other instances always find room; nothing (and admission asks the store again for
-- each request) when that half is less than the instance's smallest useful slice.
-- The rate window (admit.lua's): a slice of r requests is r entries `<id>:<k>:1..r` (k, the slice's
-- number), each stamped with the end of the slice's time (when the last of its requests may be admitted),
-- so each stays in the window at least a minute after its request's admission; the first carries the
-- slice's tokens. When the slice's time ends, the entries of the requests not drawn go (the first stays),
-- and the first's tokens become those of the requests drawn (their estimates, then their real tokens as
-- they end: the instance sends them at its next call).
-- KEYS: 1 acct, 2 res, 3 lease, 4 per (the key's budget periods), 5 terms, 6 win, 7 winv
-- ARGV: 1 the allotment's id, 2 lease ms, 3 the key's name, 4 the group's budget amount ('' none; the key's
--       own wins), 5 its period (d, w or m), 6 now (Unix seconds), 7-9 the day, week and month period
--       fields of now, 10 '1' when the key's requests are held to its balance, 11 max concurrent ('' none),
--       12 '1' when the instance holds the allotment already (then 13 and 14 are given back from it),
--       13 money given back, 14 slots given back, 15 money asked for, 16 slots asked for, 17 the smallest
--       money slice worth taking, 18 '1' to end the allotment: whatever its entry still holds is given back
--       and the entry goes (the instance ends it only when none of its requests runs and every one of them
--       is settled), 19 rpm ('' none), 20 tpm ('' none), 21 the new slice's number, 22 requests asked
--       for, 23 tokens asked for, 24 the smallest tokens slice worth taking, 25 the number of the slice
--       before ('' none, or it gave its window entries back already), 26 how many requests it took, 27 how
--       many of them were not drawn, 28 allot ms (how long the new slice is drawn from), then pairs:
--       a slice's first window entry, the tokens it stands for now
-- Returns {code, money taken, slots taken, spent, credit ('' none), budget amount (''), budget period, spent
--          in the budget period, requests taken, tokens taken, requests in the window, ms until its oldest
--          leaves, tokens in the window}; code 0 (taken, perhaps nothing), 6 revoked (or unknown to the store),
--          7 expired, 8 the allotment is gone (a look for dead leases gave it back: this instance could not
--          renew it; it takes a new one).
local acct, res, lease, per, win, winv = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7]
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
local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight', 'swept', 'wexp')
local spent, reserved, inflight = m(st[1]), m(st[2]), num(st[3])
-- The dead leases of the key, as admission looks for them (a key whose every instance admits from
-- allotments makes no admission call).
local held_now = {reserved, inflight}
local swept = sweep(res, lease, now, tonumber(ARGV[2]), num(st[4]), held_now)
reserved, inflight = held_now[1], held_now[2]
local pspent = {0, 0}
if bamount ~= '' then pspent = m(redis.call('HGET', per, pfield)) end
local window = 60000
local used, total, first_at = 0, 0, nil
local function answer(code, money, slots, r, t)
  local reset = 0
  if first_at then reset = math.max(first_at + window - now, 0) end
  return {code, ms(money), slots, ms(spent), credit, bamount, bperiod, ms(pspent), r, t, used, reset, total}
end

-- The rate window: the entries that left it go with their tokens (as in admit.lua), the slice before gives
-- back the requests it did not draw, and earlier slices' tokens become what their requests stand for now;
-- whatever became of the allotment's entry (these are the window's own).
local rpm, tpm = tonumber(ARGV[19]), tonumber(ARGV[20])
local windowed = rpm ~= nil or tpm ~= nil or ARGV[25] ~= '' or #ARGV > 28
local fresh = false
-- The window's total as stored (written back only when it changed).
local stored = 0
if windowed then
  local read, gone = shed(win, winv, now - window)
  total = read - gone
  if ARGV[25] ~= '' then
    local taken, unused = tonumber(ARGV[26]), tonumber(ARGV[27])
    local first = id .. ':' .. ARGV[25] .. ':1'
    -- The first entry carries the slice's tokens: it stays while a request was drawn from the slice.
    local from = math.max(2, taken - unused + 1)
    if unused >= taken then
      from = 1
      local was = redis.call('HGET', winv, first)
      if was then
        total = total - tonumber(was)
        redis.call('HDEL', winv, first)
      end
    end
    local back = {}
    for i = from, taken do back[#back + 1] = id .. ':' .. ARGV[25] .. ':' .. i end
    for i = 1, #back, 1000 do redis.call('ZREM', win, unpack(back, i, math.min(i + 999, #back))) end
  end
  for i = 29, #ARGV - 1, 2 do
    local was = redis.call('HGET', winv, ARGV[i])
    if was then
      total = total + tonumber(ARGV[i + 1]) - tonumber(was)
      redis.call('HSET', winv, ARGV[i], ARGV[i + 1])
    end
  end
  used = redis.call('ZCARD', win)
  if used == 0 then
    redis.call('DEL', winv)
    total = 0
  end
  if total < 0 then total = 0 end
  stored = read
  if used == 0 then stored = 0 end
  fresh = used == 0 or read == 0
  local first = redis.call('ZRANGE', win, 0, 0, 'WITHSCORES')
  if first[2] then first_at = tonumber(first[2]) end
end


-- What the entry holds now.
local held, slots = {0, 0}, 0
if ARGV[12] == '1' then
  local e = redis.call('HGET', res, id)
  if not live(e) then
    -- Gone; what the look above gave back (perhaps this very entry), and the window, are written all the
    -- same.
    redis.call('HSET', acct, 'reserved', ms(reserved), 'inflight', inflight, 'swept', swept)
    if windowed and total ~= stored then redis.call('HSET', winv, '_total', total) end
    return answer(8, {0, 0}, 0, 0, 0)
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
local money, more, r, t = {0, 0}, 0, 0, 0
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
    -- A slice with no slot admits nothing (those it holds are its running requests').
    take = more > 0
  end
  if take and (rpm or tpm) then
    -- One entry at least, to carry the tokens.
    r = 1
    if rpm then
      r = math.min(tonumber(ARGV[22]), math.floor((rpm - used) / 2))
      take = r >= 4
    end
    if take and tpm then
      t = math.min(tonumber(ARGV[23]), math.floor((tpm - total) / 2))
      take = t >= tonumber(ARGV[24])
    end
  end
  if not take then money, more, r, t = {0, 0}, 0, 0, 0 end
end
if r > 0 then
  local stamp = now + tonumber(ARGV[28])
  local k = ARGV[21]
  local adds = {}
  for i = 1, r do
    adds[#adds + 1] = stamp
    adds[#adds + 1] = id .. ':' .. k .. ':' .. i
  end
  for i = 1, #adds, 1000 do redis.call('ZADD', win, unpack(adds, i, math.min(i + 999, #adds))) end
  if tpm then
    redis.call('HSET', winv, id .. ':' .. k .. ':1', t)
    total = total + t
  end
  used = used + r
  if not first_at then first_at = stamp end
end
if windowed and total ~= stored then
  redis.call('HSET', winv, '_total', total)
end
-- The window's keys outlive their newest entry by more than its minute (as admit.lua keeps them).
local wexp = num(st[5])
if r > 0 and (fresh or wexp - now < window + 1000) then
  wexp = now + 2 * window + 1000
  redis.call('PEXPIREAT', win, wexp)
  redis.call('PEXPIREAT', winv, wexp)
end
held = madd(held, money)
reserved = madd(reserved, money)
slots = slots + more
inflight = inflight + more
if ARGV[18] == '1' or (ARGV[12] ~= '1' and mzero(held) and slots == 0 and r == 0) then
  redis.call('HDEL', res, id)
  redis.call('ZREM', lease, id)
else
  redis.call('HSET', res, id, ms(held) .. ' 0 ' .. slots)
  redis.call('ZADD', lease, now + tonumber(ARGV[2]), id)
end
redis.call('HSET', acct, 'reserved', ms(reserved), 'inflight', inflight, 'swept', swept, 'wexp', wexp)
return answer(code, money, more, r, t)
