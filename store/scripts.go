package store

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every state change is one of these scripts. They keep four rules:
//
//   - every key they touch comes in KEYS, all of one shard (one slot) on
//     a Cluster; command names are literal strings;
//   - they move a batch with one command per key (multi-member ZADD and
//     ZREM, multi-field HSET, HMGET and HDEL), and every loop is bounded by
//     the batch the caller chose;
//   - they check every argument before their first write and answer an
//     error reply for a bad one, so a call either changes nothing or does
//     all of its work: Redis does not roll back a script that fails half-way;
//   - they never decode a payload: the content's header line (codec.go)
//     holds what they need.
//
// Result codes are named the same in Go and in the Lua, whose prelude is
// generated from resultCodes.

// Result codes of the scripts.
const (
	codeOK        = 1
	codeExists    = 2 // enqueue: same id and content
	codeConflict  = 3 // enqueue: same id, other content
	codeReserved  = 4 // enqueue with replace: the notification is reserved
	codeReplaced  = 5
	codeNotFound  = 6
	codeStale     = 7 // finish: the receipt does not hold the reservation
	codeFinished  = 8 // cancel: succeeded or dead
	codeNeedKeys  = 9 // the record sits under a key the caller did not pass
	codeCancelled = 10
	codeOrdered   = 11 // enqueue with replace: the notification holds a place in its order key's line
	codeMoved     = 12 // the id's record lives in its order key's shard; the detail names it
)

var resultCodes = []struct {
	name string
	code int
}{
	{"OK", codeOK}, {"EXISTS", codeExists}, {"CONFLICT", codeConflict}, {"RESERVED", codeReserved},
	{"REPLACED", codeReplaced}, {"NOT_FOUND", codeNotFound}, {"STALE", codeStale},
	{"FINISHED", codeFinished}, {"NEED_KEYS", codeNeedKeys}, {"CANCELLED", codeCancelled},
	{"ORDERED", codeOrdered}, {"MOVED", codeMoved},
}

// maxScriptBatch bounds the items of one script call, so that no call
// blocks Redis for long and argument lists stay far below Lua's stack
// limit.
const maxScriptBatch = 1000

// luaHelpers are the functions the scripts share, in dependency order: a
// helper uses only those before it. newScript gives each script the result
// codes and just the helpers it uses, as every call of a script pays for
// defining them.
var luaHelpers = []struct{ name, code string }{
	{"header", `-- header reads a content's header line: digest, channel letter, ttr (ms), topic.
-- The digest is cut to what the store writes (digestLen), so that records
-- written with a longer one compare alike.
local function header(content)
  local d, c, t, p = string.match(content, '^(%S+) (%l) (%d+) ([^\n]+)\n')
  if d then d = string.sub(d, 1, DIGEST_LEN) end
  return d, c, t, p
end`},
	{"route", `-- route reads what moving a notification needs from its content's header
-- line: channel letter, ttr (ms), topic. It skips the digest, which only
-- comparing contents needs (header).
local function route(content)
  return string.match(content, '^%S+ (%l) (%d+) ([^\n]+)\n')
end`},
	{"queue_of", `local function queue_of(channel, topic)
  if channel == 'u' then return 'pull.' .. topic end
  return 'push'
end`},
	{"st_split", `-- st_split splits a state line (codec.go) into its nine fields, s, a, h,
-- c, r, dl, na, ua and x; nothing for none. Its counts (a, h) stay strings
-- until one changes: a line written with them unchanged then costs no
-- number formatting. The hot paths use it and st_join rather than
-- st_parse and st_line, as a table per notification costs more than all
-- the rest of its line's handling.
local function st_split(v)
  if not v then return nil end
  return string.match(v, '^(%u)|(%d+)|(%d+)|(%l)|([^|]*)|(%d*)|(%d*)|(%d*)|(.*)$')
end`},
	{"st_parse", `-- st_parse is st_split's fields as a table; nil for none.
local function st_parse(v)
  local s, a, h, c, r, dl, na, ua, x = st_split(v)
  if not s then return nil end
  return {s = s, a = a, h = h, c = c, r = r, dl = dl, na = na, ua = ua, x = x}
end`},
	{"fresh", `-- fresh is the state of a notification waiting for its first attempt,
-- which has no state line.
local function fresh(channel)
  return {s = 'S', a = '0', h = '0', c = channel, r = '', dl = '', na = '', ua = '', x = ''}
end`},
	{"st_join", `local function st_join(s, a, h, c, r, dl, na, ua, x)
  return s .. '|' .. a .. '|' .. h .. '|' .. c .. '|' .. r .. '|' .. dl .. '|' .. na .. '|' .. ua .. '|' .. x
end`},
	{"st_line", `local function st_line(o)
  return st_join(o.s, o.a, o.h, o.c, o.r, o.dl, o.na, o.ua, o.x)
end`},
	{"GAUGES", `local GAUGES = {S = 'scheduled', R = 'reserved', D = 'dead', W = 'waiting'}`},
	{"bump", `-- bump adds n to a topic's counter in deltas, by topic and then field so
-- that no field name is built per item; flush writes them, one HINCRBY per
-- counter that changed, its field named topic:field (sep ':').
local function bump(deltas, topic, field, n)
  local t = deltas[topic]
  if not t then t = {}; deltas[topic] = t end
  t[field] = (t[field] or 0) + n
end`},
	{"gauge", `local function gauge(deltas, topic, state, n)
  if GAUGES[state] then bump(deltas, topic, GAUGES[state], n) end
end`},
	{"flush", `local function flush(stats, deltas, sep)
  local any = false
  for topic, t in pairs(deltas) do
    for f, n in pairs(t) do
      if n ~= 0 then
        redis.call('HINCRBY', stats, topic .. (sep or ':') .. f, string.format('%d', n))
        any = true
      end
    end
  end
  return any
end`},
	{"push", `-- push appends values to list t[k], creating it.
local function push(t, k, ...)
  local l = t[k]
  if not l then l = {}; t[k] = l end
  for _, v in ipairs({...}) do l[#l + 1] = v end
end`},
	{"chunked", `-- chunked runs cmd on key with args in slices, keeping under Lua's
-- argument limit.
local function chunked(cmd, key, args)
  for i = 1, #args, 4000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 3999, #args)))
  end
end`},
	{"hist_fields", `-- hist_fields lists the history fields of id with h entries.
local function hist_fields(out, id, h)
  for j = 0, h - 1 do out[#out + 1] = id .. '|' .. j end
end`},
	{"schedule", `-- schedule adds score/id pairs to a due set in one ZADD, and publishes a
-- wake-up when the earliest becomes the set's new head, so that sleeping
-- dispatchers re-plan. An earliest time later than horizon needs none:
-- dispatchers poll every queue more often than that.
local function schedule(due, pairs_, earliest, channel, queue, shard, horizon)
  if horizon and earliest > horizon then
    redis.call('ZADD', due, unpack(pairs_))
    return
  end
  local head = redis.call('ZRANGE', due, '0', '0', 'WITHSCORES')
  redis.call('ZADD', due, unpack(pairs_))
  if head[2] == nil or earliest < tonumber(head[2]) then
    redis.call('PUBLISH', channel, queue .. ' ' .. shard .. ' ' .. string.format('%d', earliest))
  end
end`},
	{"due_add", `-- due_add queues score and id for the due set KEYS[k] of shard; due_flush
-- writes every queued set with one ZADD, waking dispatchers as schedule does.
local function due_add(adds, k, score, id, shard)
  local a = adds[k]
  if not a then a = {pairs = {}, earliest = tonumber(score), shard = shard}; adds[k] = a end
  a.pairs[#a.pairs + 1] = score
  a.pairs[#a.pairs + 1] = id
  a.earliest = math.min(a.earliest, tonumber(score))
end`},
	{"due_flush", `local function due_flush(adds, channel, horizon)
  for k, a in pairs(adds) do
    schedule(KEYS[k], a.pairs, a.earliest, channel, string.match(KEYS[k], '^.*:due:(.*)$'), a.shard, horizon)
  end
end`},
	{"release", `-- release ends the places of notifications that headed their order key's
-- line (succeeded, dead or cancelled). heads are {id, topic, key, push,
-- pull}, push and pull the KEYS indexes of the topic's due sets in shard:
-- the one waiting right behind each becomes due at its own time, or now
-- when that has passed; a line with nobody behind is forgotten.
local function release(order, link, stkey, heads, now, adds, deltas, sts, shard)
  if #heads == 0 then return end
  local nf = {}
  for i, h in ipairs(heads) do nf[i] = 'n|' .. h.id end
  local nexts = redis.call('HMGET', link, unpack(nf))
  local waiting, wids, ends, drop = {}, {}, {}, {}
  for i, h in ipairs(heads) do
    if nexts[i] then
      waiting[#waiting + 1] = h
      wids[#wids + 1] = nexts[i]
      drop[#drop + 1] = 'n|' .. h.id
      drop[#drop + 1] = 'p|' .. nexts[i]
    else
      ends[#ends + 1] = h
    end
  end
  if #wids > 0 then
    local wst = redis.call('HMGET', stkey, unpack(wids))
    local t = string.format('%d', now)
    for i, h in ipairs(waiting) do
      local o = st_parse(wst[i])
      if o and o.s == 'W' then
        o.s, o.ua = 'S', t
        if o.na == '' or tonumber(o.na) < now then o.na = t end
        sts[#sts + 1] = wids[i]
        sts[#sts + 1] = st_line(o)
        if o.c == 'u' then due_add(adds, h.pull, o.na, wids[i], shard) else due_add(adds, h.push, o.na, wids[i], shard) end
        bump(deltas, h.topic, 'waiting', -1)
        bump(deltas, h.topic, 'scheduled', 1)
      end
    end
    redis.call('HDEL', link, unpack(drop))
  end
  if #ends > 0 then
    local fs = {}
    for i, h in ipairs(ends) do fs[i] = h.topic .. '|' .. h.key end
    local cur = redis.call('HMGET', order, unpack(fs))
    local del = {}
    for i, h in ipairs(ends) do
      if cur[i] == h.id then del[#del + 1] = fs[i] end
    end
    if #del > 0 then redis.call('HDEL', order, unpack(del)) end
  end
end`},
	{"join", `-- join puts the notifications in joins ({id, field}) at the back of their
-- order key's lines, in order: each waits behind the line's last one, or
-- heads it when the line is empty. It returns, per id, the one it waits
-- behind (false when none), having written the line's links and tails.
local function join(order, link, joins)
  local behind = {}
  if #joins == 0 then return behind end
  local fs = {}
  for i, j in ipairs(joins) do fs[i] = j.field end
  local got = redis.call('HMGET', order, unpack(fs))
  local tails, links, oset = {}, {}, {}
  for i, j in ipairs(joins) do
    local tail = tails[j.field]
    if tail == nil then tail = got[i] end
    behind[j.id] = tail
    if tail then
      links[#links + 1] = 'n|' .. tail
      links[#links + 1] = j.id
      links[#links + 1] = 'p|' .. j.id
      links[#links + 1] = tail
    end
    tails[j.field] = j.id
  end
  for f, id in pairs(tails) do
    oset[#oset + 1] = f
    oset[#oset + 1] = id
  end
  if #links > 0 then redis.call('HSET', link, unpack(links)) end
  redis.call('HSET', order, unpack(oset))
  return behind
end`},
	{"int_arg", `local function int_arg(v, lo, hi)
  local n = tonumber(v)
  if not n or n ~= math.floor(n) or n < lo or n > hi then return nil end
  return n
end`},
}

// newScript builds a script from its body, the result codes and the helpers
// the body uses, directly or through other helpers.
func newScript(body string) *redis.Script {
	var names, codes []string
	for _, c := range resultCodes {
		names = append(names, c.name)
		codes = append(codes, fmt.Sprint(c.code))
	}
	src := "local " + strings.Join(names, ", ") + " = " + strings.Join(codes, ", ") + "\n" +
		fmt.Sprintf("local MAX_BATCH, DIGEST_LEN = %d, %d\n", maxScriptBatch, digestLen)
	uses := regexp.MustCompile(`[A-Za-z_]\w*`)
	needed := map[string]bool{}
	for _, w := range uses.FindAllString(body, -1) {
		needed[w] = true
	}
	for i := len(luaHelpers) - 1; i >= 0; i-- {
		if h := luaHelpers[i]; needed[h.name] {
			for _, w := range uses.FindAllString(h.code, -1) {
				needed[w] = true
			}
		}
	}
	for _, h := range luaHelpers {
		if needed[h.name] {
			src += h.code + "\n"
		}
	}
	return redis.NewScript(src + body)
}

// enqueueScript stores a batch of notifications of one shard, or answers
// for ids already stored.
//
//	KEYS[1]    job HASH
//	KEYS[2]    st HASH
//	KEYS[3]    hist HASH
//	KEYS[4]    stats HASH
//	KEYS[5]    finished ZSET
//	KEYS[6]    dead ZSET (every topic)
//	KEYS[7]    order HASH
//	KEYS[8]    link HASH
//	KEYS[9..]  ARGV[4] due ZSETs, then ARGV[5] dead ZSETs of topics
//	ARGV[1]    now (ms)
//	ARGV[2]    wake channel
//	ARGV[3]    shard
//	ARGV[4]    number of due keys
//	ARGV[5]    number of dead-topic keys
//	ARGV[6]    wake horizon (ms): a queue whose earliest new due time is
//	           later than now plus this needs no wake-up, as every dispatcher
//	           polls more often
//	ARGV[7..]  13 per item: id, content, due (ms), replace (1 or 0), its
//	           queue's due key (index), its topic's dead key (index), topic,
//	           queue, the old record's due key and dead key (index, 0 when
//	           not passed), attempts already made (an import), a history
//	           entry that puts it straight in the dead-letter set ("" for
//	           none), its order key ("" for none)
//
// A notification with an order key joins the back of its key's line: it
// waits behind the last one that has not ended, or is due as usual when
// there is none.
//
// Returns per item {code} (OK, EXISTS, CONFLICT, RESERVED, REPLACED,
// ORDERED), or {NEED_KEYS, queue, topic} when a replace must clean keys not
// passed. An id twice in one batch: the second is compared with the first.
var enqueueScript = newScript(`
local nq, nt, horizon = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local F, K = 13, 8
local n = (#ARGV - 6) / F
if not nq or not nt or not horizon or n < 1 or n > MAX_BATCH or n % 1 ~= 0 or #KEYS ~= K + nq + nt then
  return redis.error_reply('ERR herald enqueue: bad arguments')
end
local ids = {}
for i = 1, n do
  local b = 6 + (i - 1) * F
  local q, t, oq, ot = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10])
  local made = tonumber(ARGV[b + 11])
  if ARGV[b + 1] == '' or not tonumber(ARGV[b + 3]) or (ARGV[b + 4] ~= '0' and ARGV[b + 4] ~= '1')
    or not made or made < 0 or made % 1 ~= 0
    or not q or q < 1 or q > nq or not t or t < 1 or t > nt or not oq or oq < 0 or oq > nq or not ot or ot < 0 or ot > nt then
    return redis.error_reply('ERR herald enqueue: bad item ' .. i)
  end
  ids[i] = ARGV[b + 1]
end
local codes, adds, deltas, sts, hist, deadall, dead = {}, {}, {}, {}, {}, {}, {}
-- joins are the new notifications with an order key, in batch order: they
-- join their lines once every item is decided.
local joins, behind = {}, {}
local function add(i)
  local b = 6 + (i - 1) * F
  local id, due, made, entry, key, topic = ids[i], ARGV[b + 3], ARGV[b + 11], ARGV[b + 12], ARGV[b + 13], ARGV[b + 7]
  local ch = route(ARGV[b + 2])
  if entry ~= '' then
    -- An import of a notification that already failed for good.
    sts[#sts + 1] = id
    sts[#sts + 1] = 'D|' .. made .. '|1|' .. ch .. '||||' .. ARGV[1] .. '|' .. key
    hist[#hist + 1] = id .. '|0'
    hist[#hist + 1] = entry
    deadall[#deadall + 1] = ARGV[1]
    deadall[#deadall + 1] = id
    push(dead, K + nq + tonumber(ARGV[b + 6]), ARGV[1], id)
    bump(deltas, topic, 'dead', 1)
    return
  end
  if key ~= '' and behind[id] == nil then
    joins[#joins + 1] = {id = id, field = topic .. '|' .. key, i = i}
    return
  end
  local state = 'S'
  if behind[id] then state = 'W' end
  if state == 'S' then
    due_add(adds, K + tonumber(ARGV[b + 5]), due, id, ARGV[3])
    bump(deltas, topic, 'scheduled', 1)
  else
    bump(deltas, topic, 'waiting', 1)
  end
  if made ~= '0' or key ~= '' then
    sts[#sts + 1] = id
    sts[#sts + 1] = state .. '|' .. made .. '|0|' .. ch .. '|||' .. due .. '|' .. ARGV[1] .. '|' .. key
  end
end
do
  local old = redis.call('HMGET', KEYS[1], unpack(ids))
  local states = {}
  for i = 1, n do
    if old[i] then
      states = redis.call('HMGET', KEYS[2], unpack(ids))
      break
    end
  end
  local seen, jobs, drop, rm, old_hist = {}, {}, {}, {}, {}
  for i = 1, n do
    local b = 6 + (i - 1) * F
    local id, content = ids[i], ARGV[b + 2]
    local q, t, topic, queue = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), ARGV[b + 7], ARGV[b + 8]
    local prev = seen[id] or old[i]
    local code = OK
    if prev then
      local pd, pc, _, pt = header(prev)
      if pd == header(content) then
        code = EXISTS
      elseif ARGV[b + 4] ~= '1' or seen[id] or not pd then
        code = CONFLICT
      else
        local o = st_parse(states[i]) or fresh(pc)
        local oq = queue_of(pc, pt)
        if o.s == 'R' then
          code = RESERVED
        elseif o.x ~= '' and (o.s == 'S' or o.s == 'W') then
          -- In its key's line: replacing it would reorder the line.
          code = ORDERED
        else
          local key
          if o.s == 'S' then
            if oq == queue then key = KEYS[K + q] elseif tonumber(ARGV[b + 9]) > 0 then key = KEYS[K + tonumber(ARGV[b + 9])] end
          elseif o.s == 'D' then
            if pt == topic then key = KEYS[K + nq + t] elseif tonumber(ARGV[b + 10]) > 0 then key = KEYS[K + nq + tonumber(ARGV[b + 10])] end
            if key then push(rm, KEYS[6], id) end
          else
            key = KEYS[5]
          end
          if not key then
            code = NEED_KEYS
            codes[i] = {NEED_KEYS, oq, pt}
          else
            push(rm, key, id)
            gauge(deltas, pt, o.s, -1)
            drop[#drop + 1] = id
            hist_fields(old_hist, id, o.h)
            code = REPLACED
          end
        end
      end
    end
    if code == OK or code == REPLACED then
      seen[id] = content
      jobs[#jobs + 1] = id
      jobs[#jobs + 1] = content
      add(i)
    end
    if not codes[i] then codes[i] = {code} end
  end
  if #drop > 0 then redis.call('HDEL', KEYS[2], unpack(drop)) end
  if #old_hist > 0 then chunked('HDEL', KEYS[3], old_hist) end
  for key, l in pairs(rm) do redis.call('ZREM', key, unpack(l)) end
  if #jobs > 0 then redis.call('HSET', KEYS[1], unpack(jobs)) end
end
behind = join(KEYS[7], KEYS[8], joins)
for _, j in ipairs(joins) do add(j.i) end
if #sts > 0 then redis.call('HSET', KEYS[2], unpack(sts)) end
if #hist > 0 then redis.call('HSET', KEYS[3], unpack(hist)) end
if #deadall > 0 then redis.call('ZADD', KEYS[6], unpack(deadall)) end
for k, l in pairs(dead) do redis.call('ZADD', KEYS[k], unpack(l)) end
due_flush(adds, ARGV[2], tonumber(ARGV[1]) + horizon)
flush(KEYS[4], deltas)
return codes
`)

// enqueueOneScript stores one new notification: the common case of a
// single enqueue, kept apart from enqueueScript so that each call pays for
// nothing it does not use. It takes enqueueScript's keys and arguments with
// exactly one plain item (no replace, no import, no order key); those it
// reads:
//
//	KEYS[1]   job HASH
//	KEYS[4]   stats HASH
//	KEYS[9]   due ZSET of the item's queue
//	          (KEYS[2], [3], [5] to [8] and [10] as enqueueScript's, unused)
//	ARGV[1]   now (ms)
//	ARGV[2]   wake channel
//	ARGV[3]   shard
//	ARGV[6]   wake horizon (ms)
//	ARGV[7]   id
//	ARGV[8]   content
//	ARGV[9]   due (ms)
//	ARGV[10]  replace: must be 0
//	ARGV[13]  topic
//	ARGV[14]  queue
//	ARGV[17]  attempts already made: must be 0
//	ARGV[18]  dead-letter history entry: must be ""
//	ARGV[19]  order key: must be ""
//	          (ARGV[4], [5], [11], [12], [15], [16] as enqueueScript's)
//
// Returns its code alone (OK, EXISTS or CONFLICT).
var enqueueOneScript = newScript(`
local now, horizon, due = tonumber(ARGV[1]), tonumber(ARGV[6]), tonumber(ARGV[9])
if #ARGV ~= 19 or #KEYS ~= 10 or ARGV[7] == '' or not now or not horizon or not due or ARGV[10] ~= '0' or
    ARGV[17] ~= '0' or ARGV[18] ~= '' or ARGV[19] ~= '' then
  return redis.error_reply('ERR herald enqueue one: bad arguments')
end
if redis.call('HSETNX', KEYS[1], ARGV[7], ARGV[8]) == 0 then
  if header(redis.call('HGET', KEYS[1], ARGV[7])) == header(ARGV[8]) then return EXISTS end
  return CONFLICT
end
schedule(KEYS[9], {ARGV[9], ARGV[7]}, due, ARGV[2], ARGV[14], ARGV[3], now + horizon)
redis.call('HINCRBY', KEYS[4], ARGV[13] .. ':scheduled', 1)
return OK
`)

// enqueueNewScript stores a batch of new notifications without an order
// key, of any shards: on a Redis holding every shard, concurrent single
// enqueues then cost one script between them, not one per shard.
//
//	KEYS[1]     stats HASH that counts them
//	KEYS[2i+2]  job HASH of item i's shard (i from 0)
//	KEYS[2i+3]  due ZSET of item i's queue in its shard
//	ARGV[1]     now (ms)
//	ARGV[2]     wake channel
//	ARGV[3]     wake horizon (ms), as enqueueScript's ARGV[6]
//	ARGV[4..]   6 per item: id, content, due (ms), shard, queue, topic
//
// Returns per item its code: OK, EXISTS or CONFLICT. An id twice in one
// batch: the second is compared with the first.
var enqueueNewScript = newScript(`
local now, horizon, n = tonumber(ARGV[1]), tonumber(ARGV[3]), (#ARGV - 3) / 6
if not now or not horizon or ARGV[2] == '' or n < 1 or n % 1 ~= 0 or n > MAX_BATCH or #KEYS ~= 1 + 2 * n then
  return redis.error_reply('ERR herald enqueue new: bad arguments')
end
for i = 0, n - 1 do
  local b = 4 + 6 * i
  if ARGV[b] == '' or not tonumber(ARGV[b + 2]) or ARGV[b + 3] == '' or ARGV[b + 4] == '' or ARGV[b + 5] == '' then
    return redis.error_reply('ERR herald enqueue new: bad item ' .. (i + 1))
  end
end
local codes, adds, deltas = {}, {}, {}
for i = 0, n - 1 do
  local b, k = 4 + 6 * i, 2 + 2 * i
  local id, content, due = ARGV[b], ARGV[b + 1], tonumber(ARGV[b + 2])
  if redis.call('HSETNX', KEYS[k], id, content) == 1 then
    codes[i + 1] = OK
    local a = adds[KEYS[k + 1]]
    if not a then
      a = {pairs = {}, earliest = due, shard = ARGV[b + 3], queue = ARGV[b + 4]}
      adds[KEYS[k + 1]] = a
    end
    a.pairs[#a.pairs + 1] = ARGV[b + 2]
    a.pairs[#a.pairs + 1] = id
    a.earliest = math.min(a.earliest, due)
    bump(deltas, ARGV[b + 5], 'scheduled', 1)
  elseif header(redis.call('HGET', KEYS[k], id)) == header(content) then
    codes[i + 1] = EXISTS
  else
    codes[i + 1] = CONFLICT
  end
end
for key, a in pairs(adds) do schedule(key, a.pairs, a.earliest, ARGV[2], a.queue, a.shard, now + horizon) end
flush(KEYS[1], deltas)
return codes
`)

// reserveScript reserves up to a limit of due notifications of one queue
// in each of a group of shards, earliest first: one shard on a Cluster,
// every shard that has due work on a single Redis, so that a reservation
// costs one script there, not one per shard.
//
//	KEYS[1]         stats HASH that counts the moves
//	KEYS[4g-2..4g+1] shard g's due ZSET of the queue, reserved ZSET, job
//	                HASH and st HASH (g from 1)
//	ARGV[1]         now (ms): nothing due later is taken
//	ARGV[2g, 2g+1]  shard g's limit, and the receipt of its reservations,
//	                unique to this call and shard: with the id, it names one
//	                reservation
//
// Returns per shard {head, {id, content, state line, ...}}: the queue's
// earliest due time left in it ("" when empty) and the reserved
// notifications with their new state (reserved, receipt, deadline
// now+ttr, due time).
var reserveScript = newScript(`
local now, G = tonumber(ARGV[1]), (#ARGV - 1) / 2
if not now or G < 1 or G % 1 ~= 0 or #KEYS ~= 1 + 4 * G then
  return redis.error_reply('ERR herald reserve: bad arguments')
end
local total = 0
for g = 1, G do
  local limit = tonumber(ARGV[2 * g])
  if not limit or limit < 1 or limit % 1 ~= 0 or ARGV[2 * g + 1] == '' then
    return redis.error_reply('ERR herald reserve: bad arguments')
  end
  total = total + limit
end
if total > MAX_BATCH then return redis.error_reply('ERR herald reserve: bad arguments') end
-- dls holds the deadline of each ttr seen: items of a topic share one.
local res, deltas, dls = {}, {}, {}
for g = 1, G do
  local due, reserved, jobs, st = KEYS[4 * g - 2], KEYS[4 * g - 1], KEYS[4 * g], KEYS[4 * g + 1]
  local limit, receipt = tonumber(ARGV[2 * g]), ARGV[2 * g + 1]
  -- One read gives the due ones and, after them, the head that is left.
  local first = redis.call('ZRANGEBYSCORE', due, '-inf', '+inf', 'WITHSCORES', 'LIMIT', '0', string.format('%d', limit + 1))
  -- Scores ascend, so the due ones are a prefix: m of them. When the last
  -- within the limit is due, so are all before it; else a binary search
  -- finds where they end. Either way few scores are parsed.
  local m = math.min(#first / 2, limit)
  if m > 0 and tonumber(first[2 * m]) > now then
    local lo, hi = 0, m -- the first lo are due; the hi-th is not
    while hi - lo > 1 do
      local mid = math.floor((lo + hi) / 2)
      if tonumber(first[2 * mid]) > now then hi = mid else lo = mid end
    end
    m = lo
  end
  local ids, dues = {}, {}
  for i = 1, m do
    ids[i] = first[2 * i - 1]
    dues[i] = first[2 * i]
  end
  local head = first[2 * m + 2] or ''
  local out = {}
  if #ids > 0 then
    redis.call('ZREMRANGEBYRANK', due, '0', string.format('%d', #ids - 1))
    local contents = redis.call('HMGET', jobs, unpack(ids))
    local states = redis.call('HMGET', st, unpack(ids))
    local sts, zs = {}, {}
    for i, id in ipairs(ids) do
      local c = contents[i]
      if c then
        local ch, ttr, topic = route(c)
        local dl = dls[ttr or '']
        if not dl then
          dl = string.format('%d', now + (tonumber(ttr) or 0))
          dls[ttr or ''] = dl
        end
        local s, a, h, cl, _, _, _, _, x = st_split(states[i])
        if not s then a, h, cl, x = '0', '0', ch or 'w', '' end -- a first attempt (fresh)
        local line = st_join('R', a, h, cl, receipt, dl, dues[i], ARGV[1], x)
        sts[#sts + 1] = id
        sts[#sts + 1] = line
        zs[#zs + 1] = dl
        zs[#zs + 1] = id
        bump(deltas, topic or '', 'reserved', 1)
        out[#out + 1] = id
        out[#out + 1] = c
        out[#out + 1] = line
      end
    end
    if #sts > 0 then
      redis.call('HSET', st, unpack(sts))
      redis.call('ZADD', reserved, unpack(zs))
    end
  end
  res[g] = {head, out}
end
-- Every one reserved was scheduled.
for _, t in pairs(deltas) do t.scheduled = -t.reserved end
flush(KEYS[1], deltas)
return res
`)

// finishScript ends the attempts of a batch of reserved notifications,
// grouped by shard: ack (succeeded), retry (scheduled again), dead, or
// release (given back without counting an attempt). A call holds one
// shard on a Cluster, any number on a single Redis.
//
//	KEYS[1]      stats HASH that counts the moves
//	KEYS[2]      act HASH of this minute
//	KEYS[3..]    7 per shard: st HASH, reserved ZSET, hist HASH, finished
//	             ZSET, dead ZSET (every topic), order HASH, link HASH
//	then         ARGV[5] due ZSETs, then ARGV[6] dead ZSETs of topics, of
//	             any of the shards
//	ARGV[1]      now (ms)
//	ARGV[2]      retention (ms); 0 or less keeps finished records
//	ARGV[3]      wake channel
//	ARGV[4]      number of shards
//	ARGV[5]      number of due keys
//	ARGV[6]      number of dead-topic keys
//	ARGV[7]      seconds the act hash is kept from now; 0 leaves its expiry
//	             alone (the caller set it already this minute)
//	ARGV[8..]    2 per shard: the shard, and how many of the items are its
//	then         12 per item, shard by shard: id, receipt, action (ack,
//	             retry, dead or release), next due (ms; retry and release),
//	             due key (index), dead key (index), topic, history entry (""
//	             for none: an attempt given back before it started),
//	             lateness bucket ("" for none), order key ("" for none), and
//	             the due keys (index) of the topic's push and pull queues in
//	             its shard for the one waiting behind it (0 without an order
//	             key)
//
// A notification with an order key that succeeds or dies ends its place in
// its key's line: the one behind it becomes due.
//
// Returns one code per item: OK, or STALE when the receipt no longer holds
// the reservation (it expired and was reaped, or the notification was
// cancelled): a late finish changes nothing.
var finishScript = newScript(`
local now, G = int_arg(ARGV[1], 0, 9007199254740991), int_arg(ARGV[4], 1, MAX_BATCH)
local nq, nt = int_arg(ARGV[5], 0, MAX_BATCH), int_arg(ARGV[6], 0, MAX_BATCH)
local retention, keep = tonumber(ARGV[2]), int_arg(ARGV[7], 0, 1e9)
if not now or not G or not nq or not nt or not retention or not keep then
  return redis.error_reply('ERR herald finish: bad arguments')
end
local F, K, B = 12, 2 + 7 * G, 7 + 2 * G
local n = (#ARGV - B) / F
if n < 1 or n > MAX_BATCH or n ~= math.floor(n) or #KEYS ~= K + nq + nt then
  return redis.error_reply('ERR herald finish: bad arguments')
end
local total = 0
for g = 1, G do
  local c = int_arg(ARGV[7 + 2 * g], 1, MAX_BATCH)
  if ARGV[6 + 2 * g] == '' or not c then return redis.error_reply('ERR herald finish: bad arguments') end
  total = total + c
end
if total ~= n then return redis.error_reply('ERR herald finish: bad arguments') end
local ACTIONS = {ack = true, retry = true, dead = true, release = true}
-- QI and TI map each valid due and dead key index, as the caller writes
-- it, to its number: a lookup per item instead of parsing one.
local QI, TI = {}, {}
for j = 0, nq do QI[tostring(j)] = j end
for j = 0, nt do TI[tostring(j)] = j end
for i = 1, n do
  local b = B + (i - 1) * F
  local a, qi, ti = ARGV[b + 3], QI[ARGV[b + 5]], TI[ARGV[b + 6]]
  if ARGV[b + 1] == '' or not ACTIONS[a] or not qi or not ti
    or ((a == 'retry' or a == 'release') and (not int_arg(ARGV[b + 4], 0, 9007199254740991) or qi < 1))
    or (a == 'dead' and ti < 1)
    or (ARGV[b + 10] ~= '' and ((QI[ARGV[b + 11]] or 0) < 1 or (QI[ARGV[b + 12]] or 0) < 1)) then
    return redis.error_reply('ERR herald finish: bad item ' .. i)
  end
end
local codes, adds, dead, act, deltas, tally = {}, {}, {}, {}, {}, {}
local expires = string.format('%d', now + retention)
-- incr counts one up; the counts of a batch are mostly alike, so each is
-- formatted once.
local plus1 = {}
local function incr(v)
  local r = plus1[v]
  if not r then
    r = string.format('%d', v + 1)
    plus1[v] = r
  end
  return r
end
local first = 1
for g = 1, G do
  local k = 2 + 7 * (g - 1)
  local stkey, shard, last = KEYS[k + 1], ARGV[6 + 2 * g], first + tonumber(ARGV[7 + 2 * g]) - 1
  local ids = {}
  for i = first, last do ids[#ids + 1] = ARGV[B + (i - 1) * F + 1] end
  local states = redis.call('HMGET', stkey, unpack(ids))
  local unres, hist, sts, fin, deadall, heads = {}, {}, {}, {}, {}, {}
  for i = first, last do
    local b = B + (i - 1) * F
    local id, action, topic = ARGV[b + 1], ARGV[b + 3], ARGV[b + 7]
    local s, a, h, c, r, _, _, _, x = st_split(states[i - first + 1])
    if s ~= 'R' or r ~= ARGV[b + 2] then
      codes[i] = STALE
    else
      codes[i] = OK
      unres[#unres + 1] = id
      if ARGV[b + 8] ~= '' then
        hist[#hist + 1] = id .. '|' .. h
        hist[#hist + 1] = ARGV[b + 8]
        h = incr(h)
      end
      local na = ''
      bump(tally, topic, action, 1)
      if action == 'release' or action == 'retry' then
        s, na = 'S', ARGV[b + 4]
        due_add(adds, K + QI[ARGV[b + 5]], na, id, shard)
      end
      if action ~= 'release' then
        a = incr(a)
        if action == 'ack' then
          s = 'K'
          if retention > 0 then
            fin[#fin + 1] = expires
            fin[#fin + 1] = id
          end
        elseif action == 'dead' then
          s = 'D'
          deadall[#deadall + 1] = ARGV[1]
          deadall[#deadall + 1] = id
          push(dead, TI[ARGV[b + 6]], ARGV[1], id)
        end
        if ARGV[b + 9] ~= '' then bump(act, topic, 'lat|' .. ARGV[b + 9], 1) end
        if s ~= 'S' and ARGV[b + 10] ~= '' then
          heads[#heads + 1] = {id = id, topic = topic, key = ARGV[b + 10],
            push = K + QI[ARGV[b + 11]], pull = K + QI[ARGV[b + 12]]}
        end
      end
      sts[#sts + 1] = id
      sts[#sts + 1] = st_join(s, a, h, c, '', '', na, ARGV[1], x)
    end
  end
  if #unres > 0 then
    release(KEYS[k + 6], KEYS[k + 7], stkey, heads, now, adds, deltas, sts, shard)
    redis.call('ZREM', KEYS[k + 2], unpack(unres))
    if #hist > 0 then redis.call('HSET', KEYS[k + 3], unpack(hist)) end
    redis.call('HSET', stkey, unpack(sts))
    if #fin > 0 then redis.call('ZADD', KEYS[k + 4], unpack(fin)) end
    if #deadall > 0 then redis.call('ZADD', KEYS[k + 5], unpack(deadall)) end
  end
  first = last + 1
end
-- Each action's counts, from the tally of actions per topic.
for topic, t in pairs(tally) do
  local ack, retry, dead_, rel = t.ack or 0, t.retry or 0, t.dead or 0, t.release or 0
  bump(deltas, topic, 'reserved', -(ack + retry + dead_ + rel))
  bump(deltas, topic, 'scheduled', retry + rel)
  bump(deltas, topic, 'succeeded_total', ack)
  bump(deltas, topic, 'failed_attempts_total', retry + dead_)
  bump(deltas, topic, 'dead', dead_)
  bump(act, topic, 'ok', ack)
  bump(act, topic, 'fail', retry + dead_)
end
due_flush(adds, ARGV[3])
for t, l in pairs(dead) do redis.call('ZADD', KEYS[K + nq + t], unpack(l)) end
flush(KEYS[1], deltas)
if flush(KEYS[2], act, '|') and keep > 0 then redis.call('EXPIRE', KEYS[2], keep) end
return codes
`)

// cancelScript cancels a scheduled or reserved notification.
//
//	KEYS[1]  job HASH
//	KEYS[2]  st HASH
//	KEYS[3]  due ZSET of the topic's push queue
//	KEYS[4]  due ZSET of the topic's pull queue
//	KEYS[5]  reserved ZSET
//	KEYS[6]  finished ZSET
//	KEYS[7]  stats HASH
//	KEYS[8]  order HASH
//	KEYS[9]  link HASH
//	ARGV[1]  id
//	ARGV[2]  now (ms)
//	ARGV[3]  retention (ms); 0 or less keeps the record
//	ARGV[4]  the topic the caller expects
//	ARGV[5]  wake channel
//	ARGV[6]  shard
//
// A cancelled notification with an order key leaves its line: the one
// behind it moves up, and becomes due when it was the head.
//
// Returns {code, detail}: OK (cancelled now) or CANCELLED (already) with the
// state line, FINISHED (succeeded or dead), NOT_FOUND, MOVED with the stub
// when the id's record lives in its order key's shard, or NEED_KEYS with
// the record's topic when it is not ARGV[4].
var cancelScript = newScript(`
local now, retention = int_arg(ARGV[2], 0, 9007199254740991), tonumber(ARGV[3])
if ARGV[1] == '' or not now or not retention then return redis.error_reply('ERR herald cancel: bad arguments') end
local id = ARGV[1]
local c = redis.call('HGET', KEYS[1], id)
if not c then return {NOT_FOUND, ''} end
if string.sub(c, 1, 1) == '@' then return {MOVED, c} end
local ch, _, topic = route(c)
if not ch then return {NOT_FOUND, ''} end
local o = st_parse(redis.call('HGET', KEYS[2], id)) or fresh(ch)
if o.s == 'C' then return {CANCELLED, st_line(o)} end
if o.s == 'K' or o.s == 'D' then return {FINISHED, ''} end
if topic ~= ARGV[4] then return {NEED_KEYS, topic} end
local deltas, sts, adds = {}, {}, {}
if o.s == 'R' then
  redis.call('ZREM', KEYS[5], id)
elseif o.s == 'S' then
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
end
gauge(deltas, topic, o.s, -1)
if o.x ~= '' then
  if o.s == 'W' then
    -- Leave the middle of the line: the one behind moves up behind ours.
    local got = redis.call('HMGET', KEYS[9], 'p|' .. id, 'n|' .. id)
    local prev, nxt = got[1], got[2]
    redis.call('HDEL', KEYS[9], 'p|' .. id, 'n|' .. id)
    if prev then
      if nxt then
        redis.call('HSET', KEYS[9], 'n|' .. prev, nxt, 'p|' .. nxt, prev)
      else
        redis.call('HDEL', KEYS[9], 'n|' .. prev)
        local f = topic .. '|' .. o.x
        if redis.call('HGET', KEYS[8], f) == id then redis.call('HSET', KEYS[8], f, prev) end
      end
    end
  else
    release(KEYS[8], KEYS[9], KEYS[2], {{id = id, topic = topic, key = o.x, push = 3, pull = 4}}, now, adds, deltas, sts, ARGV[6])
  end
end
o.s, o.r, o.dl, o.na, o.ua = 'C', '', '', '', ARGV[2]
local line = st_line(o)
sts[#sts + 1] = id
sts[#sts + 1] = line
redis.call('HSET', KEYS[2], unpack(sts))
due_flush(adds, ARGV[5])
if retention > 0 then redis.call('ZADD', KEYS[6], string.format('%d', now + retention), id) end
flush(KEYS[7], deltas)
return {OK, line}
`)

// replayScript moves dead notifications of one topic in one shard back to
// their queue, due now.
//
//	KEYS[1]  st HASH
//	KEYS[2]  dead ZSET (every topic)
//	KEYS[3]  dead ZSET of the topic
//	KEYS[4]  due ZSET of the push queue
//	KEYS[5]  due ZSET of the topic's pull queue
//	KEYS[6]  stats HASH
//	KEYS[7]  order HASH
//	KEYS[8]  link HASH
//	ARGV[1]  now (ms)
//	ARGV[2]  "1" to reset attempts to 0
//	ARGV[3]  wake channel
//	ARGV[4]  shard
//	ARGV[5]  topic
//	ARGV[6..] ids (a bounded batch)
//
// Without a reset the notification gets one more attempt, and goes dead
// again if that fails; with it, the whole backoff array runs again. The
// history is kept either way. One with an order key goes to the back of
// its key's line, as a new one would. Returns how many were replayed; ids
// not dead in the topic are skipped.
var replayScript = newScript(`
local now = int_arg(ARGV[1], 0, 9007199254740991)
if not now or (ARGV[2] ~= '0' and ARGV[2] ~= '1') or ARGV[5] == '' or #ARGV < 6 or #ARGV > 5 + MAX_BATCH then
  return redis.error_reply('ERR herald replay: bad arguments')
end
local ids = {unpack(ARGV, 6)}
local states = redis.call('HMGET', KEYS[1], unpack(ids))
local scores = redis.call('ZMSCORE', KEYS[3], unpack(ids))
local moved, sts, adds, deltas, joins, replayed = {}, {}, {}, {}, {}, {}
for i, id in ipairs(ids) do
  local o = st_parse(states[i])
  if o and o.s == 'D' and scores[i] then
    moved[#moved + 1] = id
    o.s, o.na, o.ua = 'S', ARGV[1], ARGV[1]
    if ARGV[2] == '1' then o.a = '0' end
    replayed[#replayed + 1] = o
    if o.x ~= '' then joins[#joins + 1] = {id = id, field = ARGV[5] .. '|' .. o.x} end
  end
end
if #moved > 0 then
  local behind = join(KEYS[7], KEYS[8], joins)
  for i, id in ipairs(moved) do
    local o = replayed[i]
    if behind[id] then
      o.s = 'W'
      bump(deltas, ARGV[5], 'waiting', 1)
    else
      due_add(adds, o.c == 'u' and 5 or 4, ARGV[1], id, ARGV[4])
      bump(deltas, ARGV[5], 'scheduled', 1)
    end
    sts[#sts + 1] = id
    sts[#sts + 1] = st_line(o)
  end
  redis.call('ZREM', KEYS[3], unpack(moved))
  redis.call('ZREM', KEYS[2], unpack(moved))
  redis.call('HSET', KEYS[1], unpack(sts))
  due_flush(adds, ARGV[3])
  bump(deltas, ARGV[5], 'dead', -#moved)
  flush(KEYS[6], deltas)
end
return #moved
`)

// purgeScript deletes dead notifications of one topic in one shard.
//
//	KEYS[1]  job HASH
//	KEYS[2]  st HASH
//	KEYS[3]  hist HASH
//	KEYS[4]  dead ZSET (every topic)
//	KEYS[5]  dead ZSET of the topic
//	KEYS[6]  stats HASH
//	ARGV[1]  topic
//	ARGV[2..] ids (a bounded batch)
//
// Returns {how many were deleted, ids with an order key among them...}: the
// caller deletes their stubs. Ids not dead in the topic are skipped.
var purgeScript = newScript(`
if ARGV[1] == '' or #ARGV < 2 or #ARGV > 1 + MAX_BATCH then return redis.error_reply('ERR herald purge: bad arguments') end
local ids = {unpack(ARGV, 2)}
local scores = redis.call('ZMSCORE', KEYS[5], unpack(ids))
local states = redis.call('HMGET', KEYS[2], unpack(ids))
local gone, hist, deltas, keyed = {}, {}, {}, {}
for i, id in ipairs(ids) do
  if scores[i] then
    gone[#gone + 1] = id
    local o = st_parse(states[i])
    if o then
      hist_fields(hist, id, o.h)
      if o.x ~= '' then keyed[#keyed + 1] = id end
    end
  end
end
if #gone > 0 then
  redis.call('ZREM', KEYS[5], unpack(gone))
  redis.call('ZREM', KEYS[4], unpack(gone))
  redis.call('HDEL', KEYS[1], unpack(gone))
  redis.call('HDEL', KEYS[2], unpack(gone))
  if #hist > 0 then chunked('HDEL', KEYS[3], hist) end
  bump(deltas, ARGV[1], 'dead', -#gone)
  flush(KEYS[6], deltas)
end
return {#gone, unpack(keyed)}
`)

// sweepScript deletes finished records whose retention has passed.
//
//	KEYS[1]  finished ZSET
//	KEYS[2]  job HASH
//	KEYS[3]  st HASH
//	KEYS[4]  hist HASH
//	ARGV[1]  now (ms)
//	ARGV[2]  limit
//
// Returns {how many were deleted, ids with an order key among them...}: the
// caller deletes their stubs.
var sweepScript = newScript(`
if not int_arg(ARGV[1], 0, 9007199254740991) or not int_arg(ARGV[2], 1, MAX_BATCH) then
  return redis.error_reply('ERR herald sweep: bad arguments')
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return {0} end
local states = redis.call('HMGET', KEYS[3], unpack(ids))
local hist, keyed = {}, {}
for i, id in ipairs(ids) do
  local o = st_parse(states[i])
  if o then
    hist_fields(hist, id, o.h)
    if o.x ~= '' then keyed[#keyed + 1] = id end
  end
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1)
redis.call('HDEL', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[3], unpack(ids))
if #hist > 0 then chunked('HDEL', KEYS[4], hist) end
return {#ids, unpack(keyed)}
`)

// quarantineScript moves a reserved notification whose content cannot be
// decoded out of the way, so that it stops every batch it falls in. When its
// header still names its topic, the topic's reserved gauge is lowered, and
// the line of its order key, if it has one, moves on without it.
//
//	KEYS[1]  job HASH
//	KEYS[2]  st HASH
//	KEYS[3]  quarantine HASH
//	KEYS[4]  reserved ZSET
//	KEYS[5]  stats HASH
//	KEYS[6]  order HASH
//	KEYS[7]  link HASH
//	KEYS[8]  due ZSET of the topic's push queue
//	KEYS[9]  due ZSET of the topic's pull queue
//	ARGV[1]  id
//	ARGV[2]  why
//	ARGV[3]  now (ms)
//	ARGV[4]  wake channel
//	ARGV[5]  shard
//
// Returns 1 when the notification was moved, 0 when it was gone.
var quarantineScript = newScript(`
local now = int_arg(ARGV[3], 0, 9007199254740991)
if ARGV[1] == '' or not now then return redis.error_reply('ERR herald quarantine: bad arguments') end
local id = ARGV[1]
local c = redis.call('HGET', KEYS[1], id)
if not c then return 0 end
local o = st_parse(redis.call('HGET', KEYS[2], id))
redis.call('HSET', KEYS[3], id, ARGV[2] .. '\n' .. c)
redis.call('HDEL', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
local topic = select(3, route(c))
local deltas, adds, sts = {}, {}, {}
if redis.call('ZREM', KEYS[4], id) == 1 and topic then bump(deltas, topic, 'reserved', -1) end
if topic and o and o.x ~= '' then
  release(KEYS[6], KEYS[7], KEYS[2], {{id = id, topic = topic, key = o.x, push = 8, pull = 9}}, now, adds, deltas, sts, ARGV[5])
  if #sts > 0 then redis.call('HSET', KEYS[2], unpack(sts)) end
  due_flush(adds, ARGV[4])
end
flush(KEYS[5], deltas)
return 1
`)

// deadPageScript reads one dead ZSET in (time of death, id) order after a
// cursor; it writes nothing.
//
//	KEYS[1]  a dead ZSET
//	ARGV[1]  cursor score ("" to start)
//	ARGV[2]  cursor id
//	ARGV[3]  limit
//
// Returns {id, score, ...}: up to limit entries after (score, id).
var deadPageScript = newScript(`
local limit = int_arg(ARGV[3], 1, MAX_BATCH)
if not limit then return redis.error_reply('ERR herald dead page: bad arguments') end
if ARGV[1] == '' then
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
end
local out, off = {}, 0
for _ = 1, 100 do
  local zs = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', off, limit)
  for i = 1, #zs, 2 do
    if tonumber(zs[i + 1]) > tonumber(ARGV[1]) or zs[i] > ARGV[2] then
      out[#out + 1] = zs[i]
      out[#out + 1] = zs[i + 1]
      if #out == 2 * limit then return out end
    end
  end
  if #zs < 2 * limit then return out end
  off = off + limit
end
return out
`)

// headersScript reads the topic of each notification from its content's
// header, inside Redis, so that a caller grouping ids by topic does not
// fetch their payloads; it writes nothing.
//
//	KEYS[1]  job HASH
//	ARGV[1..] ids (a bounded batch)
//
// Returns one topic per id, "" for an unknown id, or the stub ("@<shard>")
// of one that lives in its order key's shard.
var headersScript = newScript(`
if #ARGV < 1 or #ARGV > MAX_BATCH then return redis.error_reply('ERR herald headers: bad arguments') end
local contents = redis.call('HMGET', KEYS[1], unpack(ARGV))
local out = {}
for i = 1, #ARGV do
  local c, topic = contents[i], nil
  if c and string.sub(c, 1, 1) == '@' then
    topic = c
  elseif c then
    topic = select(3, route(c))
  end
  out[i] = topic or ''
end
return out
`)

// stubScript points ids at the shard of their order key: a notification
// with an order key lives with its key's line, and its id's own shard keeps
// a stub, "@<shard>", in the job hash, where Get and Cancel look first.
//
//	KEYS[1]  job HASH of the ids' shard
//	ARGV     3 per id: id, stub, "1" to replace another stub (one found
//	         stale: its shard holds no such notification)
//
// Returns per id {OK} (the stub is there), {MOVED, stub} (another stub is),
// or {EXISTS} (a notification without an order key holds the id here).
var stubScript = newScript(`
if #ARGV < 3 or #ARGV % 3 ~= 0 or #ARGV > 3 * MAX_BATCH then return redis.error_reply('ERR herald stub: bad arguments') end
local codes, set = {}, {}
for i = 1, #ARGV, 3 do
  local id, stub = ARGV[i], ARGV[i + 1]
  local v = redis.call('HGET', KEYS[1], id)
  if not v or v == stub or (ARGV[i + 2] == '1' and string.sub(v, 1, 1) == '@') then
    if v ~= stub then
      set[#set + 1] = id
      set[#set + 1] = stub
    end
    codes[#codes + 1] = {OK}
  elseif string.sub(v, 1, 1) == '@' then
    codes[#codes + 1] = {MOVED, v}
  else
    codes[#codes + 1] = {EXISTS}
  end
end
if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)) end
return codes
`)

// dropStubScript deletes the stubs of notifications whose record is gone,
// leaving an id alone that has been enqueued again since.
//
//	KEYS[1]  job HASH of the ids' shard
//	ARGV     2 per id: id, stub
//
// Returns how many were deleted.
var dropStubScript = newScript(`
if #ARGV % 2 ~= 0 or #ARGV > 2 * MAX_BATCH then return redis.error_reply('ERR herald drop stub: bad arguments') end
local gone = {}
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then gone[#gone + 1] = ARGV[i] end
end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
return #gone
`)
