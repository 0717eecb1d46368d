-- ShardedCounter.take over all shards (one cluster slot: the shard keys share a hash tag).
-- KEYS = every shard key; ARGV[1] = first shard index (0-based), ARGV[2] = amount (>= 1).
-- Returns the total left after taking, or -1 (nothing taken) if the total is short.
-- Never drives any shard, and so never the total, below zero.
local amount = tonumber(ARGV[2])
local n = #KEYS
local vals = redis.call('MGET', unpack(KEYS))
local total = 0
for i = 1, n do
  local v = tonumber(vals[i]) or 0
  if v > 0 then total = total + v end
end
if total < amount then return -1 end
local need = amount
local first = tonumber(ARGV[1])
for j = 0, n - 1 do
  local i = ((first + j) % n) + 1
  local v = tonumber(vals[i]) or 0
  if v > 0 then
    local t = math.min(v, need)
    redis.call('DECRBY', KEYS[i], t)
    need = need - t
    if need == 0 then break end
  end
end
return total - amount
