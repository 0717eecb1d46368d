-- Idempotency guard: PROCESSING -> DONE or FAILED, fenced by the lease's token.
-- KEYS[1] = record, KEYS[2] = audit stream (absent: no audit)
-- ARGV[1] = fencing token, ARGV[2] = "D" (done) or "F" (failed), ARGV[3] = result bytes,
-- ARGV[4] = record TTL ms, ARGV[5] = audit stream MAXLEN,
-- ARGV[6] = "repair": also rewrite a final record this token wrote (durable store won).
-- Replies: {"ok", token} | {"lost", "gone"|"fenced"|"final", current token or ""}
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok', 'op')
if not rec[1] then return {'lost', 'gone', ''} end
if rec[2] ~= ARGV[1] then return {'lost', 'fenced', rec[2]} end
if rec[1] ~= 'P' and ARGV[6] ~= 'repair' then return {'lost', 'final', rec[2]} end
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'res', ARGV[3])
redis.call('HDEL', KEYS[1], 'lease')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if KEYS[2] then
  local ev = 'done'
  if ARGV[2] == 'F' then ev = 'failed' end
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*',
    'ev', ev, 'rec', KEYS[1], 'tok', ARGV[1], 'op', rec[3] or '')
end
return {'ok', ARGV[1]}
