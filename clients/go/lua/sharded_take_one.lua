-- ShardedCounter.take on one shard (shards spread over slots, hash_tag off).
-- KEYS[1] = the shard key; ARGV[1] = amount (>= 1).
-- Takes ARGV[1] if that much remains there; returns what is left there, or -1.
local v = tonumber(redis.call('GET', KEYS[1])) or 0
local amount = tonumber(ARGV[1])
if v < amount then return -1 end
return redis.call('DECRBY', KEYS[1], amount)
