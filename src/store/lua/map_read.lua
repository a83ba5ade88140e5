-- A versioned map read in one step. KEYS: 1 version, 2 hash. Returns {version, {field, value, ...}}.
return {redis.call('GET', KEYS[1]) or '0', redis.call('HGETALL', KEYS[2])}
