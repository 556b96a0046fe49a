package store

import "github.com/redis/go-redis/v9"

// Every state change is one of these scripts. They follow three rules that
// keep them safe on Redis Cluster and on proxies: every key they touch comes
// in KEYS (all of one shard, so one slot), command names are literal strings,
// and every loop is bounded by a batch the caller chose.
//
// Records are JSON in the shard's meta hash with short field names (see
// record in record.go): id, t topic, c channel, q queue, s state, a attempts,
// b backoff (ms), ttr (ms), na next attempt (ms), r receipt, dl deadline (ms),
// d digest, ua updated at (ms). Times are Unix milliseconds, which cjson
// encodes exactly (13 digits, under its 14-digit precision).

// prelude is shared by all scripts: gauge bookkeeping and scheduling with a
// wake-up for dispatchers waiting on a later head.
const prelude = `
local function stat(stats, topic, field, delta)
  if delta ~= 0 then redis.call('HINCRBY', stats, topic .. ':' .. field, delta) end
end
local function gauge(stats, topic, state, delta)
  if state == 'scheduled' or state == 'reserved' or state == 'dead' then
    stat(stats, topic, state, delta)
  end
end
-- schedule adds id to a due set at time at, and publishes a wake-up when it
-- becomes the set's new head, so sleeping dispatchers re-plan.
local function schedule(due, id, at, channel, queue, shard)
  local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
  redis.call('ZADD', due, at, id)
  if head[2] == nil or at < tonumber(head[2]) then
    redis.call('PUBLISH', channel, queue .. ' ' .. shard .. ' ' .. string.format('%d', at))
  end
end
local function append_history(hist, id, entry)
  local h = redis.call('HGET', hist, id)
  if h then
    redis.call('HSET', hist, id, string.sub(h, 1, -2) .. ',' .. entry .. ']')
  else
    redis.call('HSET', hist, id, '[' .. entry .. ']')
  end
end
`

func newScript(body string) *redis.Script { return redis.NewScript(prelude + body) }

// Result codes shared by the scripts.
const (
	codeOK        = 1
	codeExists    = 2 // enqueue: same id and content
	codeConflict  = 3 // enqueue: same id, other content
	codeReserved  = 4 // enqueue with replace: the notification is reserved
	codeReplaced  = 5
	codeNotFound  = 6
	codeStale     = 7 // finish: receipt does not hold the reservation
	codeFinished  = 8 // cancel: succeeded or dead
	codeNeedKeys  = 9 // the record sits under a key the caller did not pass
	codeCancelled = 10
)

// enqueueScript stores a new notification, or answers for an existing id.
//
// KEYS[1] meta HASH, [2] payload HASH, [3] hist HASH, [4] due ZSET of the
// new queue, [5] dead ZSET of the new topic, [6] finished ZSET, [7] stats
// HASH, [8] topics SET; only when the script asked for them with codeNeedKeys:
// [9] due ZSET of the old record's queue, [10] dead ZSET of its topic.
// ARGV[1] id, [2] record JSON, [3] payload, [4] "1" to replace, [5] wake
// channel, [6] shard.
//
// Returns {code, record JSON, payload}: codeOK with the new record;
// codeExists, codeConflict or codeReserved with the existing one; codeReplaced
// with the new one; codeNeedKeys when a replace must clean keys not passed.
var enqueueScript = newScript(`
local id = ARGV[1]
local new = cjson.decode(ARGV[2])
local code = 1
local old = redis.call('HGET', KEYS[1], id)
if old then
  local o = cjson.decode(old)
  if o.d == new.d then return {2, old, redis.call('HGET', KEYS[2], id) or ''} end
  if ARGV[4] ~= '1' then return {3, old, redis.call('HGET', KEYS[2], id) or ''} end
  if o.s == 'reserved' then return {4, old, redis.call('HGET', KEYS[2], id) or ''} end
  if o.s == 'scheduled' then
    local k = KEYS[4]
    if o.q ~= new.q then k = KEYS[9] end
    if not k then return {9, old, ''} end
    redis.call('ZREM', k, id)
  elseif o.s == 'dead' then
    local k = KEYS[5]
    if o.t ~= new.t then k = KEYS[10] end
    if not k then return {9, old, ''} end
    redis.call('ZREM', k, id)
  else
    redis.call('ZREM', KEYS[6], id)
  end
  gauge(KEYS[7], o.t, o.s, -1)
  redis.call('HDEL', KEYS[3], id)
  code = 5
end
redis.call('HSET', KEYS[1], id, ARGV[2])
redis.call('HSET', KEYS[2], id, ARGV[3])
redis.call('SADD', KEYS[8], new.t)
gauge(KEYS[7], new.t, 'scheduled', 1)
schedule(KEYS[4], id, new.na, ARGV[5], new.q, ARGV[6])
return {code, ARGV[2], ''}
`)

// reserveScript reserves up to a batch of due notifications of one queue in
// one shard, earliest first.
//
// KEYS[1] due ZSET, [2] reserved ZSET, [3] meta HASH, [4] payload HASH,
// [5] stats HASH. ARGV[1] now (ms), [2] batch size, [3] receipt prefix,
// unique to this call.
//
// Returns {{record JSON, payload, ...}, next due (ms) or ""}: the reserved
// records (state reserved, receipt prefix.i, deadline now+ttr) and the
// queue's new head, so the caller knows when to come back.
var reserveScript = newScript(`
local now = tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
if #ids > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1)
  local moved = {}
  for i, id in ipairs(ids) do
    local m = redis.call('HGET', KEYS[3], id)
    if m then
      local o = cjson.decode(m)
      o.s = 'reserved'
      o.r = ARGV[3] .. '.' .. i
      o.dl = now + o.ttr
      o.ua = now
      local enc = cjson.encode(o)
      redis.call('HSET', KEYS[3], id, enc)
      redis.call('ZADD', KEYS[2], o.dl, id)
      moved[o.t] = (moved[o.t] or 0) + 1
      out[#out + 1] = enc
      out[#out + 1] = redis.call('HGET', KEYS[4], id) or ''
    end
  end
  for t, n in pairs(moved) do
    stat(KEYS[5], t, 'scheduled', -n)
    stat(KEYS[5], t, 'reserved', n)
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {out, head[2] or ''}
`)

// finishScript ends the attempts of a batch of reserved notifications of one
// shard: ack (succeeded), retry (scheduled again), dead, or release (given
// back without counting an attempt).
//
// KEYS[1] meta HASH, [2] hist HASH, [3] reserved ZSET, [4] finished ZSET,
// [5] stats HASH, then for item i (1-based) KEYS[4+2i] its queue's due ZSET
// and KEYS[5+2i] its topic's dead ZSET.
// ARGV[1] now (ms), [2] retention (ms, <= 0 keeps records), [3] wake
// channel, [4] shard, then five per item: id, receipt, action (ack, retry,
// dead, release), next attempt (ms), attempt JSON for the history.
//
// Returns one code per item: codeOK, codeNotFound, or codeStale when the
// receipt no longer holds the reservation (it expired and was reaped, or the
// notification was cancelled): a late finish changes nothing.
var finishScript = newScript(`
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local codes = {}
local n = (#ARGV - 4) / 5
for i = 1, n do
  local b = 4 + (i - 1) * 5
  local id, receipt, action, at = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], tonumber(ARGV[b + 4])
  local due, dead = KEYS[4 + 2 * i], KEYS[5 + 2 * i]
  local m = redis.call('HGET', KEYS[1], id)
  if not m then
    codes[i] = 6
  else
    local o = cjson.decode(m)
    if o.s ~= 'reserved' or o.r ~= receipt then
      codes[i] = 7
    else
      redis.call('ZREM', KEYS[3], id)
      append_history(KEYS[2], id, ARGV[b + 5])
      o.r = nil
      o.dl = nil
      o.ua = now
      stat(KEYS[5], o.t, 'reserved', -1)
      if action == 'release' then
        o.s = 'scheduled'
        o.na = at
      else
        o.a = o.a + 1
        if action == 'ack' then
          o.s = 'succeeded'
          o.na = nil
          stat(KEYS[5], o.t, 'succeeded_total', 1)
        else
          stat(KEYS[5], o.t, 'failed_attempts_total', 1)
          if action == 'retry' then
            o.s = 'scheduled'
            o.na = at
          else
            o.s = 'dead'
            o.na = nil
          end
        end
      end
      redis.call('HSET', KEYS[1], id, cjson.encode(o))
      gauge(KEYS[5], o.t, o.s, 1)
      if o.s == 'scheduled' then
        schedule(due, id, at, ARGV[3], o.q, ARGV[4])
      elseif o.s == 'dead' then
        redis.call('ZADD', dead, now, id)
      elseif retention > 0 then
        redis.call('ZADD', KEYS[4], now + retention, id)
      end
      codes[i] = 1
    end
  end
end
return codes
`)

// cancelScript cancels a scheduled or reserved notification.
//
// KEYS[1] meta HASH, [2] due ZSET of its queue, [3] reserved ZSET,
// [4] finished ZSET, [5] stats HASH. ARGV[1] id, [2] now (ms), [3] retention
// (ms), [4] the queue the caller expects the record in.
//
// Returns {code, record JSON}: codeOK (cancelled now), codeCancelled
// (already), codeFinished (succeeded or dead), codeNotFound, or codeNeedKeys
// when the record's queue is not ARGV[4].
var cancelScript = newScript(`
local id, now, retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local m = redis.call('HGET', KEYS[1], id)
if not m then return {6, ''} end
local o = cjson.decode(m)
if o.s == 'cancelled' then return {10, m} end
if o.s == 'succeeded' or o.s == 'dead' then return {8, m} end
if o.q ~= ARGV[4] then return {9, m} end
if o.s == 'scheduled' then
  redis.call('ZREM', KEYS[2], id)
else
  redis.call('ZREM', KEYS[3], id)
end
gauge(KEYS[5], o.t, o.s, -1)
o.s = 'cancelled'
o.na = nil
o.r = nil
o.dl = nil
o.ua = now
local enc = cjson.encode(o)
redis.call('HSET', KEYS[1], id, enc)
if retention > 0 then redis.call('ZADD', KEYS[4], now + retention, id) end
return {1, enc}
`)

// replayScript moves dead notifications of one topic in one shard back to
// their queue, due now.
//
// KEYS[1] meta HASH, [2] dead ZSET of the topic, [3] due ZSET of the push
// queue, [4] due ZSET of the topic's pull queue, [5] stats HASH.
// ARGV[1] now (ms), [2] "1" to reset attempts to 0, [3] wake channel,
// [4] shard, [5...] ids (a bounded batch).
//
// Without a reset the notification gets one more attempt, and goes dead
// again if that fails; with it, the whole backoff array runs again. The
// history is kept either way. Returns how many were replayed (ids no longer
// dead are skipped).
var replayScript = newScript(`
local now = tonumber(ARGV[1])
local count = 0
for i = 5, #ARGV do
  local id = ARGV[i]
  local m = redis.call('HGET', KEYS[1], id)
  if m and redis.call('ZREM', KEYS[2], id) == 1 then
    local o = cjson.decode(m)
    if o.s == 'dead' then
      gauge(KEYS[5], o.t, 'dead', -1)
      gauge(KEYS[5], o.t, 'scheduled', 1)
      o.s = 'scheduled'
      if ARGV[2] == '1' then o.a = 0 end
      o.na = now
      o.ua = now
      redis.call('HSET', KEYS[1], id, cjson.encode(o))
      local due = KEYS[3]
      if o.q ~= 'push' then due = KEYS[4] end
      schedule(due, id, now, ARGV[3], o.q, ARGV[4])
      count = count + 1
    end
  end
end
return count
`)

// purgeScript deletes dead notifications of one topic in one shard.
//
// KEYS[1] meta HASH, [2] payload HASH, [3] hist HASH, [4] dead ZSET of the
// topic, [5] stats HASH. ARGV[1...] ids (a bounded batch).
// Returns how many were deleted.
var purgeScript = newScript(`
local count = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[4], id) == 1 then
    local m = redis.call('HGET', KEYS[1], id)
    if m then gauge(KEYS[5], cjson.decode(m).t, 'dead', -1) end
    redis.call('HDEL', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    count = count + 1
  end
end
return count
`)

// sweepScript deletes finished records whose retention has passed.
//
// KEYS[1] finished ZSET, [2] meta HASH, [3] payload HASH, [4] hist HASH.
// ARGV[1] now (ms), [2] batch size. Returns how many were deleted.
var sweepScript = newScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return 0 end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1)
for _, id in ipairs(ids) do
  redis.call('HDEL', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
end
return #ids
`)
