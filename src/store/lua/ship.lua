-- Usage records of an instance's local ledger reach the shared state, exactly once and in order: a batch of
-- consecutive ledger lines in one call. The cursor (the ledger offset shipped so far) moves in the same
-- atomic step as the records' effects, to after the last record the call finished (when a call fails on the
-- way, a settled record's marker stays until its stream entry is written: a retry finds it as it was), so a
-- retry, a restart or a Redis snapshot restored from earlier never counts a record twice or loses one. A request settled on the request path (its reservation
-- entry is the marker 's', see settle.lua) had its cost counted then: its record only removes the marker.
-- KEYS: 1 cursor (hash: offset, fp: the file's fingerprint), 2 usage stream, then per record: acct, res, lease, winv, per
-- ARGV: 1 offset of the first record, 2 ledger fingerprint, 3 stream length kept, 4 period fields older
--       than this start are dropped, then per record 9 values: offset after it, request id ('' for a line
--       that is no record), cost, tokens used, day/week/month period fields, ts, the record's JSON
-- Returns {1, offset after the last record} or {0, the cursor's offset} when the cursor is elsewhere.
local cur = redis.call('HMGET', KEYS[1], 'offset', 'fp')
local off, fp = cur[1] or '0', cur[2] or ''
-- The same offset of another file (a cursor restored from a snapshot taken before a rotation) is elsewhere.
if off ~= ARGV[1] or (fp ~= '' and fp ~= ARGV[2]) then return {0, off} end
local n = (#KEYS - 2) / 5
local cut = tonumber(ARGV[4])
-- A call from a script costs far more than what it does: the reservation entries are read a key at a time
-- (500 at most per call), and what settled records leave (their markers removed, the keys' last use, the
-- cursor) is written once at the end, for the records done so far even when a call fails on the way.
local entries = {}
do
  local ids_of, order = {}, {}
  for r = 0, n - 1 do
    local id = ARGV[6 + 9 * r]
    if id ~= '' then
      local res = KEYS[4 + 5 * r]
      if not ids_of[res] then
        ids_of[res] = {}
        order[#order + 1] = res
      end
      local ids = ids_of[res]
      ids[#ids + 1] = id
    end
  end
  for _, res in ipairs(order) do
    local ids = ids_of[res]
    for i = 1, #ids, 500 do
      local part = {unpack(ids, i, math.min(i + 499, #ids))}
      local got = redis.call('HMGET', res, unpack(part))
      for j, id in ipairs(part) do entries[res .. ' ' .. id] = got[j] end
    end
  end
end
local markers, marker_keys = {}, {}
local last_of, last_keys = {}, {}
local after = ARGV[1]
local ok, err = pcall(function()
  for r = 0, n - 1 do
    local acct, res, lease, winv, per = KEYS[3 + 5 * r], KEYS[4 + 5 * r], KEYS[5 + 5 * r], KEYS[6 + 5 * r], KEYS[7 + 5 * r]
    local a = 5 + 9 * r
    local id, json = ARGV[a + 1], ARGV[a + 8]
    local settled = false
    if id ~= '' then
      local e = entries[res .. ' ' .. id]
      -- Read once: a record met again (the same line twice) finds the entry gone, as it would in Redis.
      entries[res .. ' ' .. id] = nil
      if e == 's' then
        settled = true
      else
        local st = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight', 'last_used')
        local spent, reserved, inflight = m(st[1]), m(st[2]), num(st[3])
        if e then
          local c, _, slot = entry(e)
          reserved = msub(reserved, m(c))
          if slot == '1' and inflight > 0 then inflight = inflight - 1 end
          redis.call('HDEL', res, id)
          redis.call('ZREM', lease, id)
        end
        local cost = m(ARGV[a + 2])
        spent = madd(spent, cost)
        local last = ARGV[a + 7]
        if st[4] and st[4] > last then last = st[4] end
        redis.call('HSET', acct, 'spent', ms(spent), 'reserved', ms(reserved), 'inflight', inflight, 'last_used', last)
        if not mzero(cost) then
          for i = 4, 6 do
            hadd(per, ARGV[a + i], ARGV[a + 2], cost)
          end
          if redis.call('HLEN', per) > 9 then
            for _, f in ipairs(redis.call('HKEYS', per)) do
              local start = tonumber(string.sub(f, 2))
              if start and start < cut then redis.call('HDEL', per, f) end
            end
          end
        end
        local est = redis.call('HGET', winv, id)
        if est then
          redis.call('HINCRBY', winv, '_total', tonumber(ARGV[a + 3]) - tonumber(est))
          redis.call('HSET', winv, id, ARGV[a + 3])
        end
      end
    end
    if json ~= '' then
      redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'r', json)
    end
    -- The record is done: what it leaves is written at the end, with the cursor after it.
    if settled then
      if not markers[res] then
        markers[res] = {}
        marker_keys[#marker_keys + 1] = res
      end
      local ids = markers[res]
      ids[#ids + 1] = id
      local ts = ARGV[a + 7]
      if not last_of[acct] then
        last_keys[#last_keys + 1] = acct
        last_of[acct] = ts
      elseif last_of[acct] < ts then
        last_of[acct] = ts
      end
    end
    after = ARGV[a]
  end
end)
for _, res in ipairs(marker_keys) do
  local ids = markers[res]
  for i = 1, #ids, 500 do redis.call('HDEL', res, unpack(ids, i, math.min(i + 499, #ids))) end
end
for _, acct in ipairs(last_keys) do
  local last = redis.call('HGET', acct, 'last_used')
  if not last or last < last_of[acct] then redis.call('HSET', acct, 'last_used', last_of[acct]) end
end
redis.call('HSET', KEYS[1], 'offset', after, 'fp', ARGV[2])
if not ok then error(err, 0) end
return {1, after}
