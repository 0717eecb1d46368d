-- Idempotency guard: NEW -> PROCESSING, PROCESSING (lease expired) -> PROCESSING (takeover).
-- KEYS[1] = record (a hash), KEYS[2] = audit stream (absent: no audit)
-- ARGV[1] = request fingerprint, ARGV[2] = lease ms, ARGV[3] = record TTL ms,
-- ARGV[4] = operation label (for audit and recovery), ARGV[5] = audit stream MAXLEN,
-- ARGV[6] = "claim": only take over an expired lease, never create (recovery).
-- Replies: {"new", token, "begin"|"takeover", fingerprint} | {"busy", token, ms left} |
--          {"done"|"failed", token, result} | {"mismatch", token} | {"none", state}
-- Time is the Redis server's (TIME), so clients with skewed clocks agree on leases.
-- A fencing token is max(previous + 1, server microseconds): it grows even across
-- an expired and re-created record, so a holder older than the record is always fenced.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease = tonumber(ARGV[2])
local rec = redis.call('HMGET', KEYS[1], 'st', 'fp', 'tok', 'lease', 'res', 'op')
local st = rec[1]

local function take(prev, ev)
  local tok = now_us
  if prev and tonumber(prev) >= tok then tok = tonumber(prev) + 1 end
  tok = string.format('%d', tok)
  local op = rec[6] or ARGV[4]
  local fp = rec[2] or ARGV[1]
  redis.call('HSET', KEYS[1], 'st', 'P', 'fp', fp, 'tok', tok,
    'lease', string.format('%d', now_ms + lease), 'op', op)
  redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[3]), lease))
  if KEYS[2] then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*',
      'ev', ev, 'rec', KEYS[1], 'tok', tok, 'op', op)
  end
  return {'new', tok, ev, fp}
end

if ARGV[6] == 'claim' then
  if st == 'P' and tonumber(rec[4]) <= now_ms then return take(rec[3], 'takeover') end
  return {'none', st or ''}
end
if not st then return take(nil, 'begin') end
if rec[2] ~= ARGV[1] then return {'mismatch', rec[3]} end
if st == 'P' then
  local left = tonumber(rec[4]) - now_ms
  if left > 0 then return {'busy', rec[3], left} end
  return take(rec[3], 'takeover')
end
if st == 'D' then return {'done', rec[3], rec[5]} end
return {'failed', rec[3], rec[5]}
