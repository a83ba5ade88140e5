-- An instance name claimed by one running instance. KEYS: 1 the name's key. ARGV: 1 run id, 2 ttl ms.
-- Returns 'ok', or the run id of the instance that holds the name.
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return cur end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 'ok'
