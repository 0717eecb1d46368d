-- ShardedCounter.take, spread mode (shards in different slots): reserve on one shard.
-- KEYS[1] = the shard key (free units), KEYS[2] = its holds hash (same slot:
--   "{<shard key>}:held", or "<shard key>:held" when the shard key has a hash tag).
-- ARGV[1] = caller token, ARGV[2] = units wanted (>= 0; 0 only looks), ARGV[3] = lease ms.
-- Moves up to ARGV[2] free units into the caller's hold ("<units>:<deadline ms>"), after
-- returning the expired holds of callers that died mid-take. Never drives the shard below
-- zero. Returns {units reserved now, free units left, units held by other callers}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holds = redis.call('HGETALL', KEYS[2])
local others = 0
local mine = 0
for i = 1, #holds, 2 do
  local units, deadline = string.match(holds[i + 1], '^(%d+):(%d+)$')
  units = tonumber(units) or 0
  if tonumber(deadline or 0) <= now then
    redis.call('INCRBY', KEYS[1], units)
    redis.call('HDEL', KEYS[2], holds[i])
  elseif holds[i] == ARGV[1] then
    mine = units
  else
    others = others + units
  end
end
local free = tonumber(redis.call('GET', KEYS[1])) or 0
local take = math.min(math.max(free, 0), tonumber(ARGV[2]))
if take > 0 then
  redis.call('DECRBY', KEYS[1], take)
  redis.call('HSET', KEYS[2], ARGV[1], string.format('%d:%d', mine + take, now + tonumber(ARGV[3])))
end
return {take, free - take, others}
