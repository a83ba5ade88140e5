-- The end of requests of one key (the shared twin of Reservation::settle), as a function the admission
-- script (admit.lua, for the key's settlements it carries) and the settler's script (settle.lua) both call.
-- Each one's actual cost counts (in all, and in the budget periods of its admission), its reservation and
-- concurrency slot are given back, its tokens in the tpm window become the real ones, and its entry becomes
-- the marker 's', so that its record, when shipped (ship.lua), does not count the cost again.
-- The settlements are args[from] to args[stop - 1], in groups of those that share the period fields of
-- their admission and the allotment they were drawn from: per group n, the day/week/month period fields,
-- the allotment ('' none), then n times 3 values: id, cost, tokens used. Their reads and writes go in a few
-- calls for all of them (500 at a time), not a few per settlement: a call from a script costs far more than
-- what it does.
-- A request drawn from an allotment (store/allot/) has no reservation entry of its own: its worst case was
-- held in the allotment's. Its settlement counts its cost and takes it out of what the allotment's entry
-- holds (while that is there: one given back by a look for dead leases holds nothing), and leaves 's';
-- unless its record came first ('p': it counted the cost and took it out), or the settlement was applied
-- already (a call whose answer was lost, sent again: 's'), when it counts nothing. A drawn request's
-- marker stays until its instance, knowing the settlement applied and the record shipped, removes it
-- (settle.lua's forgotten ids): a settlement sent again after its record removed the marker would count
-- the cost a second time.
-- st is the key's {spent, reserved, inflight} as read from its acct hash, changed here; the caller writes it,
-- and the change of the tpm window's total (winv's _total), which it adds to its own.
-- Returns how many had a reservation to settle (one that had none, or was settled already, is left to its
-- record, which settles it when shipped), and that change.
local function settle_many(res, lease, winv, per, st, args, from, stop)
  local done, delta = 0, 0
  local seen = {}
  -- The settlements, in order: where each one's id is in args, and where its group's first period field is.
  local at, group = {}, {}
  local i = from
  while i < stop do
    local n = tonumber(args[i])
    for j = 0, n - 1 do
      at[#at + 1] = i + 5 + 3 * j
      group[#group + 1] = i + 1
    end
    i = i + 5 + 3 * n
  end
  for c0 = 1, #at, 500 do
    local c1 = math.min(c0 + 499, #at)
    local ids, owned = {}, {}
    for j = c0, c1 do
      local id = args[at[j]]
      ids[#ids + 1] = id
      if args[group[j] + 3] == '' then owned[#owned + 1] = id end
    end
    local entries = redis.call('HMGET', res, unpack(ids))
    -- Only a request with an entry of its own has a tpm window entry (a drawn one's is its slice's).
    local ests = {}
    if #owned > 0 then
      local got = redis.call('HMGET', winv, unpack(owned))
      for k, id in ipairs(owned) do ests[id] = got[k] end
    end
    -- The allotments the drawn ones came from, read once: {held, tokens, slots} while live, false if not.
    local allots, allot_ids = {}, {}
    for j = c0, c1 do
      local allot = args[group[j] + 3]
      if allot ~= '' and allots[allot] == nil then
        allots[allot] = false
        allot_ids[#allot_ids + 1] = allot
      end
    end
    if #allot_ids > 0 then
      local got = redis.call('HMGET', res, unpack(allot_ids))
      for k, allot in ipairs(allot_ids) do
        if live(got[k]) then
          local c, t, slots = entry(got[k])
          allots[allot] = {m(c), t, slots, false}
        end
      end
    end
    -- What the counted costs add up to per group (the budget periods are the group's), written once.
    local totals, order = {}, {}
    local marks, gone, tokens = {}, {}, {}
    local function count(a, g)
      local cost = m(args[a + 1])
      local t = totals[g]
      if t then
        totals[g] = madd(t, cost)
      else
        totals[g] = cost
        order[#order + 1] = g
      end
      return cost
    end
    for j = c0, c1 do
      local a, g = at[j], group[j]
      local id, e, allot = args[a], entries[j - c0 + 1], args[g + 3]
      if allot ~= '' then
        if (e == nil or e == false) and not seen[id] then
          seen[id] = true
          local cost = count(a, g)
          local held = allots[allot]
          if held then
            local take = cost
            if mlt(held[1], take) then take = held[1] end
            held[1] = msub(held[1], take)
            held[4] = true
            st[2] = msub(st[2], take)
          end
          marks[#marks + 1] = id
          marks[#marks + 1] = 's'
          done = done + 1
        end
      -- A reservation a look for dead leases gave back ('d') is settled too, its amount and slot already
      -- given back: the marker 's' then keeps it from being held again, and its record from counting again.
      elseif (live(e) or e == 'd') and not seen[id] then
        seen[id] = true
        if e ~= 'd' then
          local c, _, slot = entry(e)
          st[2] = msub(st[2], m(c))
          st[3] = math.max(st[3] - tonumber(slot), 0)
        end
        count(a, g)
        local est = ests[id]
        if est then
          local d = tonumber(args[a + 2]) - tonumber(est)
          if d ~= 0 then
            delta = delta + d
            tokens[#tokens + 1] = id
            tokens[#tokens + 1] = args[a + 2]
          end
        end
        marks[#marks + 1] = id
        marks[#marks + 1] = 's'
        gone[#gone + 1] = id
        done = done + 1
      end
    end
    -- Each group's total into the spend and its budget periods' (groups of the same periods add up first).
    local sums, fields = {}, {}
    for _, g in ipairs(order) do
      local total = totals[g]
      st[1] = madd(st[1], total)
      if not mzero(total) then
        for f = g, g + 2 do
          local field = args[f]
          if sums[field] then
            sums[field] = madd(sums[field], total)
          else
            sums[field] = total
            fields[#fields + 1] = field
          end
        end
      end
    end
    for _, field in ipairs(fields) do
      local sum = sums[field]
      hadd(per, field, ms(sum), sum)
    end
    if #tokens > 0 then redis.call('HSET', winv, unpack(tokens)) end
    for _, allot in ipairs(allot_ids) do
      local held = allots[allot]
      if held and held[4] then
        redis.call('HSET', res, allot, ms(held[1]) .. ' ' .. held[2] .. ' ' .. held[3])
      end
    end
    if #marks > 0 then redis.call('HSET', res, unpack(marks)) end
    if #gone > 0 then redis.call('ZREM', lease, unpack(gone)) end
  end
  return done, delta
end
