-- Admission of one request: the shared twin of Accounts::check_and_reserve (access/accounts.rs), atomic.
-- KEYS: 1 acct (hash: spent, reserved, inflight, last_used), 2 res (hash: id -> reservation entry),
--       3 lease (zset: id -> lease deadline), 4 rpm (zset: id -> admitted at), 5 tpm (zset: id -> admitted at),
--       6 tpmv (hash: id -> tokens, _total), 7 per (hash: period field -> spent in it)
-- ARGV: 1 id, 2 cost (worst case), 3 tokens (estimate), 4 credit ('' unlimited), 5 rpm, 6 tpm, 7 max
--       concurrent ('' none), 8 lease ms, 9 budget amount (''), 10 budget period field
-- Returns {verdict, rpm used, rpm reset ms, tpm used, tpm reset ms, tpm wait ms, in flight, spent, reserved,
--          spent in the budget period}; verdict 0 admitted, 1 rpm, 2 tpm, 3 concurrency, 4 credit, 5 budget.
local acct, res, lease, rpmk, tpmk, tpmv, per = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id, cost, tokens = ARGV[1], m(ARGV[2]), tonumber(ARGV[3])
local credit, rpm, tpm, conc = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local now = now_ms()
local window = 60000
local cutoff = now - window
local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight')
local spent, reserved, inflight = m(st[1]), m(st[2]), num(st[3])

-- Reservations whose instance stopped renewing them (it was killed) give back their credit and slot.
local dead = redis.call('ZRANGEBYSCORE', lease, '-inf', now)
for _, rid in ipairs(dead) do
  local e = redis.call('HGET', res, rid)
  -- A settled marker ('s') holds nothing: it stays until its record is shipped.
  if e and e ~= 's' then
    local c, _, slot = entry(e)
    reserved = msub(reserved, m(c))
    if slot == '1' then inflight = inflight - 1 end
    redis.call('HDEL', res, rid)
  end
end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', lease, '-inf', now) end
if inflight < 0 then inflight = 0 end

local rpm_used, rpm_reset = 0, 0
if rpm then
  redis.call('ZREMRANGEBYSCORE', rpmk, '-inf', cutoff)
  rpm_used = redis.call('ZCARD', rpmk)
  local first = redis.call('ZRANGE', rpmk, 0, 0, 'WITHSCORES')
  if first[2] then rpm_reset = tonumber(first[2]) + window - now end
end

local tpm_used, tpm_reset, tpm_wait = 0, 0, 0
if tpm then
  local total = num(redis.call('HGET', tpmv, '_total'))
  local old = redis.call('ZRANGEBYSCORE', tpmk, '-inf', cutoff)
  for _, rid in ipairs(old) do
    total = total - num(redis.call('HGET', tpmv, rid))
    redis.call('HDEL', tpmv, rid)
  end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', tpmk, '-inf', cutoff) end
  if total < 0 then total = 0 end
  redis.call('HSET', tpmv, '_total', total)
  tpm_used = total
  local first = redis.call('ZRANGE', tpmk, 0, 0, 'WITHSCORES')
  if first[2] then tpm_reset = tonumber(first[2]) + window - now end
  if tpm_used + tokens > tpm then
    -- The earliest time enough tokens leave the window for this request to fit.
    local all = redis.call('ZRANGE', tpmk, 0, -1, 'WITHSCORES')
    local freed = 0
    for i = 1, #all, 2 do
      freed = freed + num(redis.call('HGET', tpmv, all[i]))
      if tpm_used - freed + tokens <= tpm then
        tpm_wait = tonumber(all[i + 1]) + window - now
        break
      end
    end
    if tpm_wait <= 0 then tpm_wait = window end
  end
end

local verdict = 0
if rpm and rpm_used >= rpm then
  verdict = 1
elseif tpm and tpm_used + tokens > tpm then
  verdict = 2
elseif conc and inflight >= conc then
  verdict = 3
end
if verdict == 0 and credit ~= '' and not mlt(madd(spent, reserved), m(credit)) then
  verdict = 4
end
local pspent = {0, 0}
if ARGV[9] ~= '' then
  pspent = m(redis.call('HGET', per, ARGV[10]))
  if verdict == 0 and not mlt(madd(pspent, reserved), m(ARGV[9])) then verdict = 5 end
end

if verdict == 0 then
  if rpm then
    redis.call('ZADD', rpmk, now, id)
    redis.call('PEXPIRE', rpmk, window + 1000)
  end
  if tpm then
    redis.call('ZADD', tpmk, now, id)
    redis.call('HSET', tpmv, id, tokens)
    redis.call('HINCRBY', tpmv, '_total', tokens)
    redis.call('PEXPIRE', tpmk, window + 1000)
    redis.call('PEXPIRE', tpmv, window + 1000)
  end
  reserved = madd(reserved, cost)
  local slot = '0'
  if conc then
    slot = '1'
    inflight = inflight + 1
  end
  redis.call('HSET', res, id, ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. slot)
  redis.call('ZADD', lease, now + tonumber(ARGV[8]), id)
end
redis.call('HSET', acct, 'reserved', ms(reserved), 'inflight', inflight)
return {verdict, rpm_used, rpm_reset, tpm_used, tpm_reset, tpm_wait, inflight, ms(spent), ms(reserved), ms(pspent)}
