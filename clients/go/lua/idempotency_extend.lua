-- Idempotency guard: extend the lease of a PROCESSING record, fenced by its token.
-- KEYS[1] = record; ARGV[1] = fencing token, ARGV[2] = new lease ms (from now).
-- Replies: {"ok", ms left on the record's TTL} | {"lost", "gone"|"fenced"|"final", token}
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok')
if not rec[1] then return {'lost', 'gone', ''} end
if rec[2] ~= ARGV[1] then return {'lost', 'fenced', rec[2]} end
if rec[1] ~= 'P' then return {'lost', 'final', rec[2]} end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'lease', string.format('%d', now_ms + lease))
local ttl = redis.call('PTTL', KEYS[1])
if ttl < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
  ttl = lease
end
return {'ok', ttl}
