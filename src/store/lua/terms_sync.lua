-- Every key's terms written anew from the records of version ARGV[1] (at an instance's start, when the
-- terms were last written for another version: a store set up before terms existed, or changed by a writer
-- that did not keep them). Applied only if the records are still at that version.
-- KEYS: 1 keys:ver, 2 terms, 3 terms:at. ARGV: 1 the version read, then (name, terms) pairs.
-- Returns 1, or 0 when the records changed in between.
local v = redis.call('GET', KEYS[1]) or '0'
if v ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[3], v)
return 1
