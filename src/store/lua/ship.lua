-- Usage records of an instance's local ledger reach the shared state, exactly once and in order: a batch of
-- consecutive ledger lines in one call. The cursor (the ledger offset shipped so far) moves in the same
-- atomic step as the records' effects, to after the last record the call finished, so a retry, a restart or
-- a Redis snapshot restored from earlier never counts a record twice or loses one. A request settled on the
-- request path (its reservation entry is the marker 's', see settle_many.lua) had its cost counted then: its
-- record only removes the marker. Any other record (a key without a credit or limits, which makes no store
-- call on the request path; a request whose settlement did not reach the store) counts its cost here and
-- gives back what its reservation still holds.
-- A call from a script costs far more than what it does, so the records' effects are added up in the script
-- and written once at the end, a key at a time: the one call inside the loop over the records is the stream
-- entry's XADD, and a record's effects join the sums only once its XADD is done. If a call fails on the way,
-- the sums of the records finished are still written with the cursor after them, and the error goes back:
-- a retry starts at the record that failed, as it was (a key of another type than its role's, which only a
-- hand on the store makes, fails so when it is the stream or a record's account; a broken reservation or
-- window-token key fails the reads before the loop, and the whole batch waits). A write after the loop that fails (a budget-period or lease key so broken)
-- does not keep the cursor back: a retry would add again what the other writes added, and every retry
-- again. Its error, with the key's name, goes back beside the cursor.
-- KEYS: 1 cursor (hash: offset, fp: the file's fingerprint), 2 usage stream, then per record: acct, res, lease, winv, per
-- ARGV: 1 offset of the first record, 2 ledger fingerprint, 3 stream length kept, 4 period fields older
--       than this start are dropped, then per record 10 values: offset after it, request id ('' for a line
--       that is no record), cost, tokens used, day/week/month period fields, ts, the record's JSON, the id of
--       the allotment its request was admitted from ('' none, or not known: allot.lua)
-- A request admitted from an allotment is settled at its end like any other (settle_many.lua: its marker
-- 's' makes its record count nothing). A record of one that comes before its settlement (the ledger syncs a
-- record before its request's end is counted) counts its cost here and takes it out of what the
-- allotment's entry holds (an allotment that is gone, given back by a look for dead leases, holds nothing
-- to take it from), and leaves the marker 'p' so that the settlement counts nothing. While the instance
-- does not know the settlement applied, it names the allotment (ARGV's tenth value), and the marker, 's'
-- or 'p', stays for the instance to remove (settle.lua): a settlement sent again must find it.
-- A record whose reservation was given back by a look for dead leases (the marker 'd', money.lua) counts its
-- cost and removes the marker.
-- Returns {1, offset after the last record} (and a third value, the first error of the writes of the sums,
-- when one failed) or {0, the cursor's offset, its fingerprint} when the cursor is elsewhere.
local cur = redis.call('HMGET', KEYS[1], 'offset', 'fp')
local off, fp = cur[1] or '0', cur[2] or ''
-- The same offset of another file (a cursor restored from a snapshot taken before a rotation) is elsewhere.
if off ~= ARGV[1] or (fp ~= '' and fp ~= ARGV[2]) then return {0, off, fp} end
local n = (#KEYS - 2) / 5
local cut = tonumber(ARGV[4])

-- Reads `hash`'s fields `ids` (500 at most per call) into `into`, keyed "<hash> <field>".
local function read_fields(hash, ids, into)
  for i = 1, #ids, 500 do
    local part = {unpack(ids, i, math.min(i + 499, #ids))}
    local got = redis.call('HMGET', hash, unpack(part))
    for j, id in ipairs(part) do into[hash .. ' ' .. id] = got[j] end
  end
end
-- Lists of ids per key, in the order the keys first appear.
local function add_to(lists, order, key, id)
  local l = lists[key]
  if not l then
    l = {}
    lists[key] = l
    order[#order + 1] = key
  end
  l[#l + 1] = id
end

-- The records' reservation entries and tpm window entries.
local entries, estimates = {}, {}
do
  local ids_of, order = {}, {}
  for r = 0, n - 1 do
    local id, allot = ARGV[6 + 10 * r], ARGV[14 + 10 * r]
    if id ~= '' then add_to(ids_of, order, KEYS[4 + 5 * r], id) end
    if id ~= '' and allot ~= '' then add_to(ids_of, order, KEYS[4 + 5 * r], allot) end
  end
  for _, res in ipairs(order) do read_fields(res, ids_of[res], entries) end
  ids_of, order = {}, {}
  for r = 0, n - 1 do
    local id = ARGV[6 + 10 * r]
    if id ~= '' then add_to(ids_of, order, KEYS[6 + 5 * r], id) end
  end
  for _, winv in ipairs(order) do read_fields(winv, ids_of[winv], estimates) end
end

-- What the finished records leave, written at the end.
local markers, marker_keys = {}, {}      -- res -> settled records' ids (markers to remove)
local gone, gone_keys = {}, {}           -- res -> ids whose live reservation the record gives back
local unleased, unleased_keys = {}, {}   -- lease -> those ids
local accts, acct_keys = {}, {}          -- acct -> {spent, reserved, inflight, last_used} (read, then changed)
local last_of, last_keys = {}, {}        -- acct -> newest ts of its settled records
local allots, allot_keys, allot_seen = {}, {}, {} -- res -> allotments whose entry changed
local counted_first, counted_first_keys = {}, {} -- res -> drawn requests whose record counted first ('p')
local sums, sum_keys = {}, {}            -- per -> {field -> amount}, and the fields in order
local deltas, tokens, winv_keys = {}, {}, {} -- winv -> change of _total, and {id, tokens, ...}
local after = ARGV[1]

local function account(acct)
  local st = accts[acct]
  if not st then
    local v = redis.call('HMGET', acct, 'spent', 'reserved', 'inflight', 'last_used')
    st = {m(v[1]), m(v[2]), num(v[3]), v[4] or '', false}
    accts[acct] = st
    acct_keys[#acct_keys + 1] = acct
  end
  return st
end

local ok, err = pcall(function()
  for r = 0, n - 1 do
    local acct, res, lease, winv, per = KEYS[3 + 5 * r], KEYS[4 + 5 * r], KEYS[5 + 5 * r], KEYS[6 + 5 * r], KEYS[7 + 5 * r]
    local a = 5 + 10 * r
    local id, json = ARGV[a + 1], ARGV[a + 8]
    local settled, counted, e = false, false, nil
    local st = nil
    if id ~= '' then
      e = entries[res .. ' ' .. id]
      -- Read once: a record met again (the same line twice) finds the entry gone, as it would in Redis.
      entries[res .. ' ' .. id] = nil
      if e == 's' then
        settled = true
      else
        counted = true
        -- Read before the XADD: after it, nothing but sums in the script may fail for this record.
        st = account(acct)
      end
    end
    if json ~= '' then
      redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'r', json)
    end
    -- The record is done: its effects join what is written at the end.
    local ts = ARGV[a + 7]
    if settled then
      if ARGV[a + 9] == '' then add_to(markers, marker_keys, res, id) end
      if not last_of[acct] then
        last_keys[#last_keys + 1] = acct
        last_of[acct] = ts
      elseif last_of[acct] < ts then
        last_of[acct] = ts
      end
    elseif counted then
      if live(e) then
        local c, _, slot = entry(e)
        st[2] = msub(st[2], m(c))
        st[3] = math.max(st[3] - tonumber(slot), 0)
      end
      if e then
        -- The entry goes (a 'd' too: the request ended, and is never held again).
        add_to(gone, gone_keys, res, id)
        add_to(unleased, unleased_keys, lease, id)
      end
      local cost = m(ARGV[a + 2])
      st[1] = madd(st[1], cost)
      local allot = ARGV[a + 9]
      local ae = nil
      if allot ~= '' then
        ae = entries[res .. ' ' .. allot]
        if not e then add_to(counted_first, counted_first_keys, res, id) end
      end
      if live(ae) then
        local c, t, slots = entry(ae)
        local held = m(c)
        local take = cost
        if mlt(held, take) then take = held end
        st[2] = msub(st[2], take)
        if not allot_seen[res .. ' ' .. allot] then
          allot_seen[res .. ' ' .. allot] = true
          add_to(allots, allot_keys, res, allot)
        end
        entries[res .. ' ' .. allot] = ms(msub(held, take)) .. ' ' .. t .. ' ' .. slots
      end
      if st[4] < ts then st[4] = ts end
      st[5] = true
      if not mzero(cost) then
        local s = sums[per]
        if not s then
          s = {fields = {}}
          sums[per] = s
          sum_keys[#sum_keys + 1] = per
        end
        for i = 4, 6 do
          local f = ARGV[a + i]
          if s[f] then
            s[f] = madd(s[f], cost)
          else
            s[f] = cost
            s.fields[#s.fields + 1] = f
          end
        end
      end
      local est = estimates[winv .. ' ' .. id]
      if est then
        -- What the window holds for the id from now on (a record met again reads it).
        estimates[winv .. ' ' .. id] = ARGV[a + 3]
        if not deltas[winv] then
          deltas[winv] = 0
          tokens[winv] = {}
          winv_keys[#winv_keys + 1] = winv
        end
        deltas[winv] = deltas[winv] + num(ARGV[a + 3]) - num(est)
        local t = tokens[winv]
        t[#t + 1] = id
        t[#t + 1] = ARGV[a + 3]
      end
    end
    after = ARGV[a]
  end
end)

-- An error as text (redis.call raises a table).
local function text(e)
  if type(e) == 'table' then e = e.err end
  return tostring(e)
end
-- Runs `f(...)`, the writes to `key`; the first error is kept (with the key's name), and the other keys'
-- writes still run.
local late = nil
local function guarded(key, f, ...)
  local done, e = pcall(f, ...)
  if not done and not late then late = key .. ': ' .. text(e) end
end
-- Removes each key's listed members (`command`: HDEL or ZREM), 500 at a time.
local function remove_all(command, lists, order)
  for _, key in ipairs(order) do
    guarded(key, function()
      local ids = lists[key]
      for i = 1, #ids, 500 do redis.call(command, key, unpack(ids, i, math.min(i + 499, #ids))) end
    end)
  end
end
remove_all('HDEL', markers, marker_keys)
for _, res in ipairs(counted_first_keys) do
  guarded(res, function()
    local ids, marks = counted_first[res], {}
    for _, id in ipairs(ids) do
      marks[#marks + 1] = id
      marks[#marks + 1] = 'p'
    end
    for i = 1, #marks, 1000 do redis.call('HSET', res, unpack(marks, i, math.min(i + 999, #marks))) end
  end)
end
for _, res in ipairs(allot_keys) do
  guarded(res, function()
    for _, allot in ipairs(allots[res]) do redis.call('HSET', res, allot, entries[res .. ' ' .. allot]) end
  end)
end
remove_all('HDEL', gone, gone_keys)
remove_all('ZREM', unleased, unleased_keys)
for _, acct in ipairs(acct_keys) do
  local st = accts[acct]
  if st[5] then
    local last = st[4]
    if last_of[acct] and last < last_of[acct] then last = last_of[acct] end
    last_of[acct] = nil
    guarded(acct, redis.call, 'HSET', acct, 'spent', ms(st[1]), 'reserved', ms(st[2]), 'inflight', st[3], 'last_used', last)
  end
end
for _, acct in ipairs(last_keys) do
  local ts = last_of[acct]
  if ts then
    guarded(acct, function()
      local last = redis.call('HGET', acct, 'last_used')
      if not last or last < ts then redis.call('HSET', acct, 'last_used', ts) end
    end)
  end
end
for _, per in ipairs(sum_keys) do
  guarded(per, function()
    local s = sums[per]
    for _, f in ipairs(s.fields) do hadd(per, f, ms(s[f]), s[f]) end
    if redis.call('HLEN', per) > 9 then
      for _, f in ipairs(redis.call('HKEYS', per)) do
        local start = tonumber(string.sub(f, 2))
        if start and start < cut then redis.call('HDEL', per, f) end
      end
    end
  end)
end
for _, winv in ipairs(winv_keys) do
  guarded(winv, function()
    if deltas[winv] ~= 0 then redis.call('HINCRBY', winv, '_total', deltas[winv]) end
    local t = tokens[winv]
    for i = 1, #t, 1000 do redis.call('HSET', winv, unpack(t, i, math.min(i + 999, #t))) end
  end)
end
redis.call('HSET', KEYS[1], 'offset', after, 'fp', ARGV[2])
if not ok then
  if late then error(text(err) .. '; and then ' .. late, 0) end
  error(err, 0)
end
if late then return {1, after, late} end
return {1, after}
