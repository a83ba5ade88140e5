-- The end of one request (the shared twin of Reservation::settle), as a function the admission script
-- (admit.lua, for the key's settlements it carries) and the settler's script (settle.lua) both call. Its actual
-- cost counts (in all, and in the budget periods of its admission), its reservation and concurrency slot are
-- given back, its tokens in the tpm window become the real ones, and its entry becomes the marker 's', so
-- that its record, when shipped (ship.lua), does not count the cost again.
-- st is the key's {spent, reserved, inflight} as read from its acct hash, changed here; the caller writes it.
-- Returns true, or false when there was no reservation to settle (the record then settles it when shipped).
local function settle_one(res, lease, winv, per, st, id, cost_s, tokens_s, fd, fw, fm)
  local e = redis.call('HGET', res, id)
  if not e or e == 's' then return false end
  local c, _, slot = entry(e)
  st[2] = msub(st[2], m(c))
  if slot == '1' and st[3] > 0 then st[3] = st[3] - 1 end
  local cost = m(cost_s)
  st[1] = madd(st[1], cost)
  if not mzero(cost) then
    hadd(per, fd, cost_s, cost)
    hadd(per, fw, cost_s, cost)
    hadd(per, fm, cost_s, cost)
  end
  local est = redis.call('HGET', winv, id)
  if est then
    local delta = tonumber(tokens_s) - tonumber(est)
    if delta ~= 0 then
      redis.call('HINCRBY', winv, '_total', delta)
      redis.call('HSET', winv, id, tokens_s)
    end
  end
  redis.call('HSET', res, id, 's')
  redis.call('ZREM', lease, id)
  return true
end
