-- Admission of requests of one key, in order, each as if alone: the shared twin of
-- Accounts::check_and_reserve (access/accounts.rs), atomic. Admissions of the same key asked at the same moment
-- on this instance come in one call (store/batch.rs): the key's state is read once, each request is judged
-- after those before it, and the state is written once.
-- The key's credit, own budget, expiry and state are read here from its terms (kept by keys_write.lua in
-- the same atomic step as its record), never taken from the instance asking: an instance's copy of the keys
-- may be a moment old, the store's is the one in force.
-- KEYS: 1 acct (hash: spent, reserved, inflight, last_used, swept: when its dead leases were last looked
--       for, wexp: when the window's keys expire), 2 res (hash: id -> reservation entry), 3 lease (zset:
--       id -> lease deadline), 4 win (zset: id -> admitted at, the last minute's admissions of a key with
--       an rpm or tpm limit), 5 winv (hash: id -> tokens, and _total), 6 per (hash: period field ->
--       spent in it), 7 terms (hash: key name -> "credit|budget|period|expires|state")
-- ARGV: 1 n, the number of admissions, 2 rpm, 3 tpm, 4 max concurrent ('' none), 5 lease ms, 6 the group's
--       budget amount ('' none; the key's own wins), 7 its period (d, w or m), 8 now (Unix seconds), 9 the
--       key's name, 10-12 the day, week and month period fields of now, 13 '1' when the requests are held to
--       the key's balance ('' for token counting, and for a key the instance holds to no credit or budget:
--       it sends no output limit upstream), then n admissions of 3 values each: id, cost (worst case),
--       tokens (estimate); then the key's settlements this call carries (settle_many.lua, applied first: a
--       client's next request is judged after its last one ended), in settle_many's groups: n, the
--       day/week/month period fields of their admission, the allotment they were drawn from ('' none), then
--       n times id, cost, tokens used
-- Returns one answer per admission, in order: {verdict, rpm used, rpm reset ms, tpm used, tpm reset ms, tpm
--          wait ms, in flight, spent, '' (the reserved amount is not written out: nothing reads it, and
--          money text costs a script more than most of an admission), spent in the budget period, credit
--          ('' unlimited), budget amount (''), budget period}; verdict 0 admitted, 1 rpm, 2 tpm, 3 concurrency, 4 credit, 5 budget,
--          6 revoked (or unknown to the store), 7 expired.
local acct, res, lease, win, winv, per = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local n = tonumber(ARGV[1])
local rpm, tpm, conc = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local credit, bamount, bperiod, expires, state = '', ARGV[6], ARGV[7], '', 'u'
local terms = redis.call('HGET', KEYS[7], ARGV[9])
if terms then
  local c, b, bp, ex, st = string.match(terms, '^(%d*)|(%d*)|(%a?)|(%d*)|(%a)$')
  if st then
    credit, expires, state = c, ex, st
    if b ~= '' then bamount, bperiod = b, bp end
  end
end
if ARGV[13] ~= '1' then credit, bamount = '', '' end
local pfield = ({d = ARGV[10], w = ARGV[11], m = ARGV[12]})[bperiod]
if not pfield then bamount = '' end
local now = now_ms()
local window = 60000
local cutoff = now - window
local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight', 'swept', 'wexp')
local spent, reserved, inflight = m(st[1]), m(st[2]), num(st[3])
local changed = false

-- The key's settlements carried by this call, in the order they were made. What they change in the tpm
-- window's total is written with the admissions' change, in one call.
local settled = {spent, reserved, inflight}
local first_settle = 14 + 3 * n
local done, added = settle_many(res, lease, winv, per, settled, ARGV, first_settle, #ARGV + 1)
if done > 0 then changed = true end
spent, reserved, inflight = settled[1], settled[2], settled[3]

-- Reservations whose instance stopped renewing them (it was killed) give back their credit and slots
-- (money.lua's sweep).
local held_now = {reserved, inflight}
local swept, looked = sweep(res, lease, now, tonumber(ARGV[5]), num(st[4]), held_now)
if looked then changed = true end
reserved, inflight = held_now[1], held_now[2]
if inflight < 0 then inflight = 0 end

-- One window serves both limits: rpm counts its entries, tpm adds up their tokens.
local used, total, first_at = 0, 0, nil
-- The window's total as stored (nil: not read; then a change is added to it, not written over it).
local stored = nil
-- The window's keys are made anew by this call (their expiry is then set, below).
local fresh = false
if rpm or tpm then
  -- The window's total is read with the tokens of the entries that leave it, and written once, at the end,
  -- as it then stands (theirs, the settlements' and the admissions' changes in it).
  local read, gone = shed(win, winv, cutoff)
  added = added - gone
  used = redis.call('ZCARD', win)
  if used == 0 then
    -- An empty window holds no tokens: whatever its hash still holds (it outlived the set, or the key's
    -- limits changed meanwhile) goes with it.
    redis.call('DEL', winv)
    stored, total = 0, 0
  else
    stored = read
    total = read + added
    if total < 0 then total = 0 end
  end
  fresh = used == 0 or (tpm ~= nil and stored == 0)
  local first = redis.call('ZRANGE', win, 0, 0, 'WITHSCORES')
  if first[2] then first_at = tonumber(first[2]) end
end
local cm = nil
if credit ~= '' then cm = m(credit) end
local pspent = {0, 0}
local bm = nil
if bamount ~= '' then
  pspent = m(redis.call('HGET', per, pfield))
  bm = m(bamount)
end
local expired = expires ~= '' and tonumber(expires) <= tonumber(ARGV[8])

-- What the admitted requests write goes in one call per kind at the end (a call from a script costs far
-- more than what it does); the window's is written first where a tpm wait must read the window.
local spent_s, pspent_s = ms(spent), ms(pspent)
local answers = {}
local entries, leases, wins, winvs = {}, {}, {}, {}
local windowed = false
local function write_window()
  for i = 1, #wins, 1000 do redis.call('ZADD', win, unpack(wins, i, math.min(i + 999, #wins))) end
  for i = 1, #winvs, 1000 do redis.call('HSET', winv, unpack(winvs, i, math.min(i + 999, #winvs))) end
  if stored ~= nil then
    if total ~= stored then
      redis.call('HSET', winv, '_total', total)
      stored = total
    end
  elseif added ~= 0 then
    redis.call('HINCRBY', winv, '_total', added)
  end
  wins, winvs, added = {}, {}, 0
end
for i = 0, n - 1 do
  local id, cost_s, tokens_s = ARGV[14 + 3 * i], ARGV[15 + 3 * i], ARGV[16 + 3 * i]
  local tokens = tonumber(tokens_s)
  local reset, tpm_wait = 0, 0
  if first_at then reset = first_at + window - now end
  if tpm and total + tokens > tpm then
    write_window()
    -- The earliest time enough tokens leave the window for this request to fit.
    local all = redis.call('ZRANGE', win, 0, -1, 'WITHSCORES')
    local freed = 0
    for j = 1, #all, 2 do
      freed = freed + num(redis.call('HGET', winv, all[j]))
      if total - freed + tokens <= tpm then
        tpm_wait = tonumber(all[j + 1]) + window - now
        break
      end
    end
    if tpm_wait <= 0 then tpm_wait = window end
  end

  local verdict = 0
  if state ~= 'a' then
    verdict = 6
  elseif expired then
    verdict = 7
  elseif rpm and used >= rpm then
    verdict = 1
  elseif tpm and total + tokens > tpm then
    verdict = 2
  elseif conc and inflight >= conc then
    verdict = 3
  end
  if verdict == 0 and cm and not mlt(madd(spent, reserved), cm) then
    verdict = 4
  end
  if verdict == 0 and bm and not mlt(madd(pspent, reserved), bm) then verdict = 5 end

  local answer = {verdict, used, reset, total, reset, tpm_wait, 0, spent_s, '', pspent_s, credit, bamount, bperiod}
  if verdict == 0 then
    if rpm or tpm then
      wins[#wins + 1] = now
      wins[#wins + 1] = id
      if tpm then
        winvs[#winvs + 1] = id
        winvs[#winvs + 1] = tokens
        added = added + tokens
      end
      used = used + 1
      if tpm then total = total + tokens end
      if not first_at then first_at = now end
      windowed = true
    end
    reserved = madd(reserved, m(cost_s))
    local slot = '0'
    if conc then
      slot = '1'
      inflight = inflight + 1
    end
    entries[#entries + 1] = id
    entries[#entries + 1] = cost_s .. ' ' .. tokens_s .. ' ' .. slot
    leases[#leases + 1] = now + tonumber(ARGV[5])
    leases[#leases + 1] = id
    changed = true
  end
  -- In flight as this admission left it.
  answer[7] = inflight
  answers[i + 1] = answer
end
write_window()
for i = 1, #entries, 1000 do redis.call('HSET', res, unpack(entries, i, math.min(i + 999, #entries))) end
for i = 1, #leases, 1000 do redis.call('ZADD', lease, unpack(leases, i, math.min(i + 999, #leases))) end
-- The window's keys outlive their newest entry by more than its minute: their expiry is set two minutes
-- ahead, and set again only when less than a minute and a second of it is left (wexp, in acct), not at
-- each call; and when they are made anew (the window was empty, or its token hash is new: a tpm limit
-- added). Both get it whatever the limits, so the token hash never outlives the set by more than that.
local wexp = num(st[5])
if windowed and (fresh or wexp - now < window + 1000) then
  wexp = now + 2 * window + 1000
  redis.call('PEXPIREAT', win, wexp)
  redis.call('PEXPIREAT', winv, wexp)
end
if changed then
  redis.call('HSET', acct, 'spent', ms(spent), 'reserved', ms(reserved), 'inflight', inflight, 'swept', swept,
    'wexp', wexp)
end
return answers
