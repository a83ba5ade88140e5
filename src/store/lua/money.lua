-- Money in scripts. Amounts are whole numbers of picocredits (10^-12 credit) written in decimal, as in the
-- rest of tollgate. Lua numbers are doubles, exact only to 2^53 (about 9,000 credits), so an amount is split
-- into whole credits and picocredits ({hi, lo}, lo < 10^12), each exact. Every amount here is >= 0.
local UNIT = 1000000000000
local function num(v)
  if v then return tonumber(v) or 0 end
  return 0
end
local function m(s)
  if not s or s == '' then return {0, 0} end
  local n = #s
  if n <= 12 then return {0, tonumber(s)} end
  return {tonumber(string.sub(s, 1, n - 12)), tonumber(string.sub(s, n - 11))}
end
local function madd(a, b)
  local hi, lo = a[1] + b[1], a[2] + b[2]
  if lo >= UNIT then lo = lo - UNIT; hi = hi + 1 end
  return {hi, lo}
end
-- a - b, never below zero
local function msub(a, b)
  local hi, lo = a[1] - b[1], a[2] - b[2]
  if lo < 0 then lo = lo + UNIT; hi = hi - 1 end
  if hi < 0 then return {0, 0} end
  return {hi, lo}
end
local function mlt(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end
-- Half of a, rounded down.
local function mhalf(a)
  local lo = math.floor(a[2] / 2)
  if a[1] % 2 == 1 then lo = lo + UNIT / 2 end
  return {math.floor(a[1] / 2), lo}
end
local function mzero(a)
  return a[1] == 0 and a[2] == 0
end
local function ms(a)
  if a[1] == 0 then return string.format('%d', a[2]) end
  return string.format('%d%012d', a[1], a[2])
end
-- Adds amount a (>= 0; s, its decimal text) to a hash field holding an amount: one HINCRBY while the
-- field and the sum fit a 64-bit integer (9.2 million credits; exact), else (Redis refuses the increment and
-- changes nothing) the split arithmetic above, read and written back.
local function hadd(key, field, s, a)
  local r = redis.pcall('HINCRBY', key, field, s)
  if type(r) == 'table' and r.err then
    redis.call('HSET', key, field, ms(madd(m(redis.call('HGET', key, field)), a)))
  end
end
-- A reservation entry: "<cost> <tokens> <slots>", the concurrency slots it holds (a request's: 0 or 1; an
-- allotment's, allot.lua: any number). Beside entries,
-- res holds markers: 's', a request settled (its record, when shipped, counts nothing), 'd', a
-- reservation given back by a look for dead leases (its instance may still run the request and hold it
-- again, `rehold.lua`), and 'p', a request drawn from an allotment whose record was shipped (and counted its
-- cost) before its settlement came (which then counts nothing, and removes it). A 'd' keeps a lease of its
-- own and goes at the first look after that runs out; the request's settlement makes it 's', and its
-- release or its shipped record (which then counts the cost) removes it.
local function live(e)
  return e ~= nil and e ~= false and e ~= 's' and e ~= 'd' and e ~= 'p'
end
local function entry(e)
  local c, t, s = string.match(e, '^(%d+) (%d+) (%d+)$')
  return c, t, s
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Reservations whose instance stopped renewing them (it was killed) give back their credit and slots. A
-- key's leases are looked at once a second at most (a lease runs for lease_secs, 30 s by default: a second
-- more changes nothing), 1,000 of them at a time; while a look finds that many, the next call looks again.
-- `swept` is when the key's last look was (its acct hash keeps it, written only when that is written anyway:
-- a key the store only refuses gets no state, and looks at each call). held is the key's {reserved,
-- inflight}, changed here. Returns when the look was, and whether it changed anything.
local function sweep(res, lease, now, lease_ms, swept, held)
  local dead = {}
  if now - swept >= 1000 or swept > now then
    dead = redis.call('ZRANGEBYSCORE', lease, '-inf', now, 'LIMIT', 0, 1000)
    if #dead < 1000 then swept = now end
  end
  for _, rid in ipairs(dead) do
    local e = redis.call('HGET', res, rid)
    if live(e) then
      -- Given back; the entry becomes the marker 'd' for another lease, in which the instance that admitted
      -- the request, if it only lost the store for a while, holds it again at its next renewal (an
      -- allotment's instance takes a new one instead).
      local c, _, slot = entry(e)
      held[1] = msub(held[1], m(c))
      held[2] = math.max(held[2] - tonumber(slot), 0)
      redis.call('HSET', res, rid, 'd')
      redis.call('ZADD', lease, now + lease_ms, rid)
    else
      -- A 'd' whose lease ran out too goes. A settled marker ('s') holds nothing: it stays until its record
      -- is shipped.
      if e == 'd' then redis.call('HDEL', res, rid) end
      redis.call('ZREM', lease, rid)
    end
  end
  return swept, #dead > 0
end
-- The entries of a rate window (zset win, their tokens in hash winv, whose _total is their sum) admitted at
-- `cutoff` or before leave it, with their tokens. Returns the window's total as stored, and the tokens that
-- left (the caller writes the total once, with its own changes).
local function shed(win, winv, cutoff)
  local old = redis.call('ZRANGEBYSCORE', win, '-inf', cutoff)
  if #old == 0 then return num(redis.call('HGET', winv, '_total')), 0 end
  local read, gone = 0, 0
  for i = 1, #old, 500 do
    local part = {unpack(old, i, math.min(i + 499, #old))}
    if i == 1 then part[#part + 1] = '_total' end
    local got = redis.call('HMGET', winv, unpack(part))
    if i == 1 then
      read = num(got[#got])
      got[#got] = nil
      part[#part] = nil
    end
    for _, v in ipairs(got) do gone = gone + num(v) end
    redis.call('HDEL', winv, unpack(part))
  end
  redis.call('ZREMRANGEBYSCORE', win, '-inf', cutoff)
  return read, gone
end
