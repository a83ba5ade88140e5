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
-- A reservation entry: "<cost> <tokens> <slot>", slot 1 while it holds a concurrency slot. Beside entries,
-- res holds markers: 's', a request settled (its record, when shipped, counts nothing), and 'd', a
-- reservation given back by a look for dead leases (its instance may still run the request and hold it
-- again, `rehold.lua`). A 'd' keeps a lease of its own and goes at the first look after that runs out; the
-- request's settlement makes it 's', and its release or its shipped record (which then counts the cost)
-- removes it.
local function live(e)
  return e ~= nil and e ~= false and e ~= 's' and e ~= 'd'
end
local function entry(e)
  local c, t, s = string.match(e, '^(%d+) (%d+) (%d)$')
  return c, t, s
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
