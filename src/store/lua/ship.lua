-- One usage record of an instance's local ledger reaches the shared state, exactly once: the cursor (the
-- ledger offset shipped so far) moves in the same atomic step as the spend, so a retry, a restart or a
-- Redis snapshot restored from earlier never counts a record twice or loses one. A request settled on the
-- request path (its entry is the marker 's') had its cost counted then: its record only removes the marker.
-- KEYS: 1 cursor (hash: offset, fp), 2 usage stream, 3 acct, 4 res, 5 lease, 6 tpmv, 7 per
-- ARGV: 1 offset of the record, 2 offset after it, 3 ledger fingerprint, 4 request id, 5 cost, 6 tokens used
--       ('' unknown), 7-9 day/week/month period fields, 10 ts, 11 the record's JSON ('' none), 12 stream
--       length kept, 13 '1' when the record names a key, 14 period fields older than this start are dropped
-- Returns {1, offset after} or {0, the cursor's offset} when the cursor is elsewhere.
local off = redis.call('HGET', KEYS[1], 'offset')
if not off then off = '0' end
if off ~= ARGV[1] then return {0, off} end
if ARGV[13] == '1' then
  local acct, res, id = KEYS[3], KEYS[4], ARGV[4]
  local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight', 'last_used')
  local spent, reserved, inflight = m(st[1]), m(st[2]), num(st[3])
  local e = redis.call('HGET', res, id)
  -- 's': the request was settled on the request path (settle.lua), which counted its cost already.
  local settled = e == 's'
  if settled then
    redis.call('HDEL', res, id)
  elseif e then
    local c, _, slot = entry(e)
    reserved = msub(reserved, m(c))
    if slot == '1' and inflight > 0 then inflight = inflight - 1 end
    redis.call('HDEL', res, id)
    redis.call('ZREM', KEYS[5], id)
  end
  local cost = m(ARGV[5])
  if settled then cost = {0, 0} end
  spent = madd(spent, cost)
  local last = ARGV[10]
  if st[4] and st[4] > last then last = st[4] end
  redis.call('HSET', acct, 'spent', ms(spent), 'reserved', ms(reserved), 'inflight', inflight, 'last_used', last)
  if not mzero(cost) then
    for i = 7, 9 do
      redis.call('HSET', KEYS[7], ARGV[i], ms(madd(m(redis.call('HGET', KEYS[7], ARGV[i])), cost)))
    end
    if redis.call('HLEN', KEYS[7]) > 9 then
      local cut = tonumber(ARGV[14])
      for _, f in ipairs(redis.call('HKEYS', KEYS[7])) do
        local start = tonumber(string.sub(f, 2))
        if start and start < cut then redis.call('HDEL', KEYS[7], f) end
      end
    end
  end
  if ARGV[6] ~= '' and not settled then
    local est = redis.call('HGET', KEYS[6], id)
    if est then
      redis.call('HINCRBY', KEYS[6], '_total', tonumber(ARGV[6]) - tonumber(est))
      redis.call('HSET', KEYS[6], id, ARGV[6])
    end
  end
end
if ARGV[11] ~= '' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[12], '*', 'r', ARGV[11])
end
redis.call('HSET', KEYS[1], 'offset', ARGV[2], 'fp', ARGV[3])
return {1, ARGV[2]}
