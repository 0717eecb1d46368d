-- ShardedCounter.take, spread mode: settle the caller's hold on one shard.
-- KEYS[1] = the shard key, KEYS[2] = its holds hash; ARGV[1] = caller token,
-- ARGV[2] = "commit" (the units are taken) or "release" (they go back to the shard).
-- Returns the units the hold had: 0 when there was none (already settled, or expired
-- and returned to the shard by sharded_reserve.lua).
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return 0 end
local units = tonumber(string.match(h, '^(%d+):')) or 0
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[2] == 'release' and units > 0 then
  redis.call('INCRBY', KEYS[1], units)
end
return units
