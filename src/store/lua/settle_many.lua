-- The end of requests of one key (the shared twin of Reservation::settle), as a function the admission
-- script (admit.lua, for the key's settlements it carries) and the settler's script (settle.lua) both call.
-- Each one's actual cost counts (in all, and in the budget periods of its admission), its reservation and
-- concurrency slot are given back, its tokens in the tpm window become the real ones, and its entry becomes
-- the marker 's', so that its record, when shipped (ship.lua), does not count the cost again.
-- The settlements are args[from], args[from + 6], ... (count of them), 6 values each: id, cost, tokens used,
-- the day/week/month period fields of its admission. Their reads and writes go in a few calls for all of
-- them (500 at a time), not a few per settlement: a call from a script costs far more than what it does.
-- st is the key's {spent, reserved, inflight} as read from its acct hash, changed here; the caller writes it,
-- and the change of the tpm window's total (winv's _total), which it adds to its own.
-- Returns how many had a reservation to settle (one that had none, or was settled already, is left to its
-- record, which settles it when shipped), and that change.
local function settle_many(res, lease, winv, per, st, args, from, count)
  local done, delta = 0, 0
  local seen = {}
  for c0 = 0, count - 1, 500 do
    local c1 = math.min(c0 + 499, count - 1)
    local ids = {}
    for j = c0, c1 do ids[#ids + 1] = args[from + 6 * j] end
    local entries = redis.call('HMGET', res, unpack(ids))
    local ests = redis.call('HMGET', winv, unpack(ids))
    local sums, fields = {}, {}
    local marks, gone, tokens = {}, {}, {}
    for j = c0, c1 do
      local a = from + 6 * j
      local id, e = args[a], entries[j - c0 + 1]
      -- A reservation a look for dead leases gave back ('d') is settled too, its amount and slot already
      -- given back: the marker 's' then keeps it from being held again, and its record from counting again.
      if (live(e) or e == 'd') and not seen[id] then
        seen[id] = true
        if e ~= 'd' then
          local c, _, slot = entry(e)
          st[2] = msub(st[2], m(c))
          st[3] = math.max(st[3] - tonumber(slot), 0)
        end
        local cost = m(args[a + 1])
        st[1] = madd(st[1], cost)
        if not mzero(cost) then
          for f = a + 3, a + 5 do
            local field = args[f]
            if sums[field] then
              sums[field] = madd(sums[field], cost)
            else
              sums[field] = cost
              fields[#fields + 1] = field
            end
          end
        end
        local est = ests[j - c0 + 1]
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
    for _, field in ipairs(fields) do
      local sum = sums[field]
      hadd(per, field, ms(sum), sum)
    end
    if #tokens > 0 then redis.call('HSET', winv, unpack(tokens)) end
    if #gone > 0 then
      redis.call('HSET', res, unpack(marks))
      redis.call('ZREM', lease, unpack(gone))
    end
  end
  return done, delta
end
