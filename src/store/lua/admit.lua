-- Admission of one request: the shared twin of Accounts::check_and_reserve (access/accounts.rs), atomic.
-- The key's credit, own budget, expiry and state are read here from its terms (kept by keys_write.lua in
-- the same atomic step as its record), never taken from the instance asking: an instance's copy of the keys
-- may be a moment old, the store's is the one in force.
-- KEYS: 1 acct (hash: spent, reserved, inflight, last_used), 2 res (hash: id -> reservation entry),
--       3 lease (zset: id -> lease deadline), 4 win (zset: id -> admitted at, the last minute's admissions of
--       a key with an rpm or tpm limit), 5 winv (hash: id -> tokens, and _total), 6 per (hash: period field ->
--       spent in it), 7 terms (hash: key name -> "credit|budget|period|expires|state")
-- ARGV: 1 id, 2 cost (worst case), 3 tokens (estimate), 4 rpm, 5 tpm, 6 max concurrent ('' none), 7 lease
--       ms, 8 the group's budget amount ('' none; the key's own wins), 9 its period (d, w or m), 10 now (Unix
--       seconds), 11 the key's name, 12-14 the day, week and month period fields of now, 15 '1' when the
--       request is held to the key's balance ('' for token counting, and for a key the instance holds to no
--       credit or budget: it sends no output limit upstream), then the key's settlements this call carries
--       (settle_one.lua, applied first: a client's next request is judged after its last one ended), 6 values
--       each: id, cost, tokens used, day/week/month period fields of its admission
-- Returns {verdict, rpm used, rpm reset ms, tpm used, tpm reset ms, tpm wait ms, in flight, spent, reserved,
--          spent in the budget period, credit ('' unlimited), budget amount (''), budget period};
--          verdict 0 admitted, 1 rpm, 2 tpm, 3 concurrency, 4 credit, 5 budget, 6 revoked (or unknown to
--          the store), 7 expired.
local acct, res, lease, win, winv, per = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, cost, tokens = ARGV[1], m(ARGV[2]), tonumber(ARGV[3])
local rpm, tpm, conc = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local credit, bamount, bperiod, expires, state = '', ARGV[8], ARGV[9], '', 'u'
local terms = redis.call('HGET', KEYS[7], ARGV[11])
if terms then
  local c, b, bp, ex, st = string.match(terms, '^(%d*)|(%d*)|(%a?)|(%d*)|(%a)$')
  if st then
    credit, expires, state = c, ex, st
    if b ~= '' then bamount, bperiod = b, bp end
  end
end
if ARGV[15] ~= '1' then credit, bamount = '', '' end
local pfield = ({d = ARGV[12], w = ARGV[13], m = ARGV[14]})[bperiod]
if not pfield then bamount = '' end
local now = now_ms()
local window = 60000
local cutoff = now - window
local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight')
local spent, reserved, inflight = m(st[1]), m(st[2]), num(st[3])
local changed = false

-- The key's settlements carried by this call, in the order they were made.
local settled = {spent, reserved, inflight}
for a = 16, #ARGV - 5, 6 do
  if settle_one(res, lease, winv, per, settled, ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4],
      ARGV[a + 5]) then
    changed = true
  end
end
spent, reserved, inflight = settled[1], settled[2], settled[3]

-- Reservations whose instance stopped renewing them (it was killed) give back their credit and slot.
local dead = redis.call('ZRANGEBYSCORE', lease, '-inf', now, 'LIMIT', 0, 256)
for _, rid in ipairs(dead) do
  local e = redis.call('HGET', res, rid)
  -- A settled marker ('s') holds nothing: it stays until its record is shipped.
  if e and e ~= 's' then
    local c, _, slot = entry(e)
    reserved = msub(reserved, m(c))
    if slot == '1' then inflight = inflight - 1 end
    redis.call('HDEL', res, rid)
  end
  redis.call('ZREM', lease, rid)
  changed = true
end
if inflight < 0 then inflight = 0 end

-- One window serves both limits: rpm counts its entries, tpm adds up their tokens.
local used, total, reset, tpm_wait = 0, 0, 0, 0
if rpm or tpm then
  local old = redis.call('ZRANGEBYSCORE', win, '-inf', cutoff)
  if #old > 0 then
    local gone = 0
    for i = 1, #old, 500 do
      local part = {unpack(old, i, math.min(i + 499, #old))}
      for _, v in ipairs(redis.call('HMGET', winv, unpack(part))) do gone = gone + num(v) end
      redis.call('HDEL', winv, unpack(part))
    end
    redis.call('ZREMRANGEBYSCORE', win, '-inf', cutoff)
    if gone > 0 then redis.call('HINCRBY', winv, '_total', -gone) end
  end
  used = redis.call('ZCARD', win)
  total = num(redis.call('HGET', winv, '_total'))
  if total < 0 then total = 0 end
  local first = redis.call('ZRANGE', win, 0, 0, 'WITHSCORES')
  if first[2] then reset = tonumber(first[2]) + window - now end
  if tpm and total + tokens > tpm then
    -- The earliest time enough tokens leave the window for this request to fit.
    local all = redis.call('ZRANGE', win, 0, -1, 'WITHSCORES')
    local freed = 0
    for i = 1, #all, 2 do
      freed = freed + num(redis.call('HGET', winv, all[i]))
      if total - freed + tokens <= tpm then
        tpm_wait = tonumber(all[i + 1]) + window - now
        break
      end
    end
    if tpm_wait <= 0 then tpm_wait = window end
  end
end

local verdict = 0
if state ~= 'a' then
  verdict = 6
elseif expires ~= '' and tonumber(expires) <= tonumber(ARGV[10]) then
  verdict = 7
elseif rpm and used >= rpm then
  verdict = 1
elseif tpm and total + tokens > tpm then
  verdict = 2
elseif conc and inflight >= conc then
  verdict = 3
end
if verdict == 0 and credit ~= '' and not mlt(madd(spent, reserved), m(credit)) then
  verdict = 4
end
local pspent = {0, 0}
if bamount ~= '' then
  pspent = m(redis.call('HGET', per, pfield))
  if verdict == 0 and not mlt(madd(pspent, reserved), m(bamount)) then verdict = 5 end
end

if verdict == 0 then
  if rpm or tpm then
    redis.call('ZADD', win, now, id)
    redis.call('PEXPIRE', win, window + 1000)
    if tpm then
      redis.call('HSET', winv, id, tokens)
      redis.call('HINCRBY', winv, '_total', tokens)
      redis.call('PEXPIRE', winv, window + 1000)
    end
  end
  reserved = madd(reserved, cost)
  local slot = '0'
  if conc then
    slot = '1'
    inflight = inflight + 1
  end
  redis.call('HSET', res, id, ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. slot)
  redis.call('ZADD', lease, now + tonumber(ARGV[7]), id)
  changed = true
end
if changed then
  redis.call('HSET', acct, 'spent', ms(spent), 'reserved', ms(reserved), 'inflight', inflight)
end
return {verdict, used, reset, total, reset, tpm_wait, inflight, ms(spent), ms(reserved), ms(pspent), credit,
  bamount, bperiod}
