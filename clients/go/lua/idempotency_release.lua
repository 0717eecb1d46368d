-- Idempotency guard: PROCESSING -> NEW (the holder gives up; the next caller runs it).
-- KEYS[1] = record, KEYS[2] = audit stream (absent: no audit)
-- ARGV[1] = fencing token, ARGV[2] = audit stream MAXLEN.
-- Replies: {"ok", token} | {"lost", "gone"|"fenced"|"final", token}
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok', 'op')
if not rec[1] then return {'lost', 'gone', ''} end
if rec[2] ~= ARGV[1] then return {'lost', 'fenced', rec[2]} end
if rec[1] ~= 'P' then return {'lost', 'final', rec[2]} end
redis.call('DEL', KEYS[1])
if KEYS[2] then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*',
    'ev', 'release', 'rec', KEYS[1], 'tok', ARGV[1], 'op', rec[3] or '')
end
return {'ok', ARGV[1]}
