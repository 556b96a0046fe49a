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
//     holds what they need;
//   - those that must work while Redis is at maxmemory (reserve, finish,
//     cancel, purge, sweep, quarantine, unpark, an endpoint's failing
//     streak and disable, a give-back's mark) delete before their first
//     write that may grow memory: Redis refuses such a write only as a
//     script's first, so the others (enqueue) change nothing when refused.
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
-- written with a longer one compare alike, and without the first due time
-- that follows it after a colon.
local function header(content)
  local d, c, t, p = string.match(content, '^([^%s:]+)%S* (%l) (%d+) ([^\n]+)\n')
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
  if not n or n % 1 ~= 0 or n < lo or n > hi then return nil end
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
	// Locals for the globals every script reads: Lua looks a global up in a
	// table each time, a local or upvalue it reads directly. Measured with
	// callgrind over BenchmarkScriptCost, 1.7% of a life's instructions.
	src := "local KEYS, ARGV, redis, string, table, math, tonumber, tostring, unpack, pairs, ipairs = KEYS, ARGV, redis, string, table, math, tonumber, tostring, unpack, pairs, ipairs\n" +
		"local " + strings.Join(names, ", ") + " = " + strings.Join(codes, ", ") + "\n" +
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
// ORDERED), {code, id} for one stored that waits behind id in its order
// key's line, or {NEED_KEYS, queue, topic} when a replace must clean keys
// not passed. An id twice in one batch: the second is compared with the
// first.
var enqueueScript = newScript(`
local nq, nt, horizon = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local F, K = 13, 8
local n = (#ARGV - 6) / F
if not nq or not nt or not horizon or n < 1 or n > MAX_BATCH or n % 1 ~= 0 or #KEYS ~= K + nq + nt then
  return redis.error_reply('ERR herald enqueue: bad arguments')
end
local ids, chs = {}, {}
for i = 1, n do
  local b = 6 + (i - 1) * F
  local q, t, oq, ot = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10])
  local made = tonumber(ARGV[b + 11])
  local ch, _, topic = route(ARGV[b + 2])
  if ARGV[b + 1] == '' or not ch or topic ~= ARGV[b + 7] or not tonumber(ARGV[b + 3]) or (ARGV[b + 4] ~= '0' and ARGV[b + 4] ~= '1')
    or not made or made < 0 or made % 1 ~= 0
    or not q or q < 1 or q > nq or not t or t < 1 or t > nt or not oq or oq < 0 or oq > nq or not ot or ot < 0 or ot > nt then
    return redis.error_reply('ERR herald enqueue: bad item ' .. i)
  end
  ids[i], chs[i] = ARGV[b + 1], ch
end
local codes, adds, deltas, sts, hist, deadall, dead = {}, {}, {}, {}, {}, {}, {}
-- joins are the new notifications with an order key, in batch order: they
-- join their lines once every item is decided.
local joins, behind = {}, {}
local function add(i)
  local b = 6 + (i - 1) * F
  local id, due, made, entry, key, topic = ids[i], ARGV[b + 3], ARGV[b + 11], ARGV[b + 12], ARGV[b + 13], ARGV[b + 7]
  local ch = chs[i]
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
            -- Succeeded or cancelled: its finished entry, if written before
            -- entries held batches, is its bare id. A batch's entry stays:
            -- the sweep skips a record whose state line has changed since.
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
for _, j in ipairs(joins) do
  add(j.i)
  if behind[j.id] then codes[j.i] = {codes[j.i][1], behind[j.id]} end
end
if #sts > 0 then redis.call('HSET', KEYS[2], unpack(sts)) end
if #hist > 0 then redis.call('HSET', KEYS[3], unpack(hist)) end
if #deadall > 0 then redis.call('ZADD', KEYS[6], unpack(deadall)) end
for k, l in pairs(dead) do redis.call('ZADD', KEYS[k], unpack(l)) end
due_flush(adds, ARGV[2], tonumber(ARGV[1]) + horizon)
flush(KEYS[4], deltas)
return codes
`)

// enqueueNewScript stores a batch of new notifications without an order
// key: on a Redis holding every shard, concurrent single enqueues cost one
// script between them, and on a Cluster one per shard. Go groups the items
// by the keys they share, and names per group the earliest due time, so
// that the script reads no score and parses no time but to check it.
//
//	KEYS[1]   stats HASH that counts them
//	KEYS[2..] the job HASHes, due ZSETs and ready LISTs the groups name
//	ARGV[1]   wake channel
//	ARGV[2]   number of groups
//	then      8 per group: its job key and due key (KEYS index), topic,
//	          shard, queue, number of items, the earliest due time of its
//	          items ("" when that is later than the wake horizon: every
//	          dispatcher polls more often, so none needs waking), and
//	          "ready" when every item is due already ("" otherwise): its
//	          due key is then the queue's ready list
//	then      per item, group by group: id, content and, except in a
//	          ready group, its due time (ms)
//
// A group's earliest becomes the queue's head, and wakes the dispatchers,
// when nothing is due at or before it. A ready group is appended to the
// list, which costs far less than a due-set insert, and wakes the
// dispatchers when the list was empty; its items carry no due time, as
// the reservation reads each one's from its content, and parsing one costs
// more than storing the item. Returns per item its code: OK, EXISTS or
// CONFLICT. An id twice in one batch: the second is compared with the
// first.
var enqueueNewScript = newScript(`
local G = int_arg(ARGV[2], 1, MAX_BATCH)
if not G or ARGV[1] == '' then return redis.error_reply('ERR herald enqueue new: bad arguments') end
local NK = #KEYS
-- Each group's keys, count and width, checked and parsed once: a number
-- parsed costs more than the rest of a group's checks.
local jobs, dues, counts, widths, total = {}, {}, {}, {}, 0
for g = 1, G do
  local b = 8 * g - 6
  local j, d, c, w, r = int_arg(ARGV[b + 1], 2, NK), int_arg(ARGV[b + 2], 2, NK), int_arg(ARGV[b + 6], 1, MAX_BATCH), ARGV[b + 7], ARGV[b + 8]
  if not j or not d or ARGV[b + 3] == '' or ARGV[b + 4] == '' or ARGV[b + 5] == '' or not c
    or (w ~= '' and not tonumber(w)) or (r ~= '' and (r ~= 'ready' or w == '')) then
    return redis.error_reply('ERR herald enqueue new: bad group ' .. g)
  end
  jobs[g], dues[g], counts[g], widths[g] = KEYS[j], KEYS[d], c, r == '' and 3 or 2
  total = total + c
end
if total > MAX_BATCH then return redis.error_reply('ERR herald enqueue new: bad arguments') end
local at, i = 2 + 8 * G, 0
for g = 1, G do
  local wd = widths[g]
  for _ = 1, counts[g] do
    i = i + 1
    if not ARGV[at + wd] or ARGV[at + 1] == '' or (wd == 3 and not tonumber(ARGV[at + 3])) then
      return redis.error_reply('ERR herald enqueue new: bad item ' .. i)
    end
    at = at + wd
  end
end
if #ARGV ~= at then return redis.error_reply('ERR herald enqueue new: bad arguments') end
local codes = {}
i, at = 0, 2 + 8 * G
for g = 1, G do
  local gb, job, c, wd = 8 * g - 6, jobs[g], counts[g], widths[g]
  -- A ready group's entries are ids, another's (due, id) pairs for ZADD;
  -- n counts the notifications stored.
  local zs, n = {}, 0
  for _ = 1, c do
    local id, content = ARGV[at + 1], ARGV[at + 2]
    i = i + 1
    if redis.call('HSETNX', job, id, content) == 1 then
      codes[i] = OK
      n = n + 1
      if wd == 2 then
        zs[n] = id
      else
        zs[2 * n - 1], zs[2 * n] = ARGV[at + 3], id
      end
    elseif header(redis.call('HGET', job, id)) == header(content) then
      codes[i] = EXISTS
    else
      codes[i] = CONFLICT
    end
    at = at + wd
  end
  if n > 0 then
    local due, earliest = dues[g], ARGV[gb + 7]
    if wd == 2 then
      if redis.call('RPUSH', due, unpack(zs)) == n then
        redis.call('PUBLISH', ARGV[1], ARGV[gb + 5] .. ' ' .. ARGV[gb + 4] .. ' ' .. earliest)
      end
    else
      local ahead = earliest == '' or #redis.call('ZRANGEBYSCORE', due, '-inf', earliest, 'LIMIT', '0', '1') > 0
      redis.call('ZADD', due, unpack(zs))
      if not ahead then
        redis.call('PUBLISH', ARGV[1], ARGV[gb + 5] .. ' ' .. ARGV[gb + 4] .. ' ' .. earliest)
      end
    end
    -- The count as Go wrote it when every one was stored: formatting a
    -- number costs more than the command.
    redis.call('HINCRBY', KEYS[1], ARGV[gb + 3] .. ':scheduled', n == c and ARGV[gb + 6] or string.format('%d', n))
  end
end
return codes
`)

// reserveScript reserves up to a limit of due notifications of one queue
// in each of a group of shards, earliest first: one shard on a Cluster,
// every shard that has due work on a single Redis, so that a reservation
// costs one script there, not one per shard.
//
//	KEYS[1]           stats HASH that counts the moves
//	KEYS[5g-3..5g+1]  shard g's due ZSET of the queue, reserved ZSET, job
//	                  HASH, st HASH and ready LIST of the queue (g from 1)
//	KEYS[2+5G]        the call's given-back mark (markScript)
//	ARGV[1]           now (ms): nothing due later is taken
//	ARGV[2g, 2g+1]    shard g's limit, and the receipt of its reservations,
//	                  unique to this call and shard: with the id, it names
//	                  one reservation
//	ARGV[2+2G]        how many of those reserved start at once: the ones
//	                  after them, in shard order, wait reserved ahead for a
//	                  worker, and their receipts end in "+" (aheadMark)
//	                  and a number, ARGV[3+2G] and up in that order, which
//	                  the reaper compares with the caller's starts
//	                  (Store.Start); Reserve passes the limits' sum,
//	                  ReserveAhead 0
//
// The ready list fills what the due set's due ones leave of the limit: it
// holds, oldest first, the notifications that were due when they were
// enqueued (enqueueNewScript), which costs far less than a due-set entry
// per notification at enqueue and at reservation. An entry is
// only a hint: one whose notification has a state line since (cancelled,
// replaced and attempted, reserved through its due-set entry) is dropped,
// and one whose content is not due yet (a replace moved it later, or "now"
// was rounded up) goes to the due set at its time, so that nothing starts
// early or twice. A due-set entry whose state is not scheduled is dropped
// too, for the same reason.
//
// A call whose mark is set was given back before Redis ran it (its request
// held up on its way while the caller gave up and GiveBack found nothing
// it held): it reserves nothing, and answers an error no one reads.
//
// Returns per shard {head, ids, contents, lines}: the queue's earliest due
// time left in it (now while its ready list holds more; "" when empty), and
// the ids taken with their contents and new state lines (reserved, receipt,
// deadline now+ttr); an id not reserved has false for both. The line keeps
// the due time of a notification that had a state line; one that had none
// is due at its content's first due time, which Go reads, so that no score
// is read or formatted per notification.
var reserveScript = newScript(`
local now, G = tonumber(ARGV[1]), (#ARGV - 3) / 2
local started, seq = int_arg(ARGV[#ARGV - 1], 0, MAX_BATCH), int_arg(ARGV[#ARGV], 0, 9007199254740991)
if not now or G < 1 or G % 1 ~= 0 or #KEYS ~= 2 + 5 * G or not started or not seq then
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
if redis.call('EXISTS', KEYS[#KEYS]) == 1 then
  return redis.error_reply('ERR herald reserve: given back before it ran')
end
-- routes caches, by the header line after its digest, what a reservation
-- needs of it: {channel letter, deadline, topic}. The notifications of a
-- topic share one, so each is parsed once per call.
local res, routes, counts, nowlen = {}, {}, {}, #ARGV[1]
for g = 1, G do
  local due, reserved, jobs, st, ready = KEYS[5 * g - 3], KEYS[5 * g - 2], KEYS[5 * g - 1], KEYS[5 * g], KEYS[5 * g + 1]
  local receipt, limit = ARGV[2 * g + 1], tonumber(ARGV[2 * g])
  local ahead = receipt .. '+'
  local rq = string.match(ready, ':ready:(.*)$')
  -- The due set first: what it holds was due before anything enqueued
  -- since, so that a flood of new notifications never holds back a
  -- scheduled one or a retry.
  local ids = redis.call('ZRANGEBYSCORE', due, '-inf', ARGV[1], 'LIMIT', '0', ARGV[2 * g])
  -- zn came from the due set, the first ones; the rest from the list.
  local zn = #ids
  if zn > 0 then
    -- The due ones are the first by rank.
    redis.call('ZREMRANGEBYRANK', due, '0', string.format('%d', zn - 1))
  end
  local more = zn < limit and redis.call('LPOP', ready, limit - zn) or {}
  for _, id in ipairs(more) do ids[#ids + 1] = id end
  -- The list may hold more unless it gave less than asked.
  local drained = zn < limit and #more < limit - zn
  local m, contents, lines = #ids, {}, {}
  if m > 0 then
    contents = redis.call('HMGET', jobs, unpack(ids))
    local states = redis.call('HMGET', st, unpack(ids))
    local sts, zs, later, seen, n = {}, {}, {}, {}, 0
    for i = 1, m do
      local c, id, old = contents[i], ids[i], states[i]
      local line = false
      if c and not seen[id] and (not old or (i <= zn and string.sub(old, 1, 1) == 'S')) then
        local sp = string.find(c, ' ', 1, true) or 0
        local key = string.sub(c, sp + 1, (string.find(c, '\n', sp + 1, true) or 1) - 1)
        local r = routes[key]
        if not r then
          local ch, ttr, topic = string.match(key, '^(%l) (%d+) (.+)$')
          r = {ch or 'w', string.format('%d', now + (tonumber(ttr) or 0)), topic or ''}
          r[4] = queue_of(r[1], r[3])
          routes[key] = r
        end
        -- A list entry's due time, from its content's header, when that is
        -- later than now. Due times are integers without leading zeros, so
        -- that comparing lengths and then strings compares them without
        -- parsing either (a parse costs more than the rest of the check).
        local at
        if i > zn then
          local colon = string.find(c, ':', 1, true)
          if colon and colon < sp then
            local d = string.sub(c, colon + 1, sp - 1)
            if #d > nowlen or (#d == nowlen and d > ARGV[1]) then at = tonumber(d) end
          end
        end
        if i > zn and r[4] ~= rq then
          -- Replaced into another queue: its entry there is the live one.
        elseif at then
          later[#later + 1] = string.format('%d', at)
          later[#later + 1] = id
        else
          seen[id] = true
          local rc = receipt
          if started > 0 then
            started = started - 1
          else
            rc = ahead .. string.format('%d', seq)
            seq = seq + 1
          end
          if old then
            local _, a, h, cl, _, _, na, _, x = st_split(old)
            line = st_join('R', a or '0', h or '0', cl or r[1], rc, r[2], na or '', ARGV[1], x or '')
          else
            -- A first attempt: none made, due at its content's first due
            -- time. st_join's format, written out: the call costs every
            -- first reservation 1,500 instructions (callgrind).
            line = 'R|0|0|' .. r[1] .. '|' .. rc .. '|' .. r[2] .. '||' .. ARGV[1] .. '|'
          end
          sts[n + 1], sts[n + 2], zs[n + 1], zs[n + 2] = id, line, r[2], id
          n = n + 2
          counts[r[3]] = (counts[r[3]] or 0) + 1
        end
      end
      if not line then contents[i] = false end
      lines[i] = line
    end
    if n > 0 then
      redis.call('HSET', st, unpack(sts))
      redis.call('ZADD', reserved, unpack(zs))
    end
    if #later > 0 then redis.call('ZADD', due, unpack(later)) end
  end
  local head = redis.call('ZRANGE', due, '0', '0', 'WITHSCORES')
  if not drained and (not head[2] or tonumber(head[2]) > now) then head[2] = ARGV[1] end
  res[g] = {head[2] or '', ids, contents, lines}
end
-- Every one reserved was scheduled.
for topic, c in pairs(counts) do
  local d = string.format('%d', c)
  redis.call('HINCRBY', KEYS[1], topic .. ':reserved', d)
  redis.call('HINCRBY', KEYS[1], topic .. ':scheduled', '-' .. d)
end
return res
`)

// markScript sets a mark that expires, while Redis is full too: a lost
// Reserve call given back (reserveScript), a dashboard session signed out,
// the starts of a dispatcher's notifications reserved ahead (Store.Start).
//
// KEYS[1] the mark.
// ARGV[1] how long the mark lasts (ms).
// ARGV[2] its value; "1" when absent.
var markScript = newScript(`
if not int_arg(ARGV[1], 1, 9007199254740991) or ARGV[2] == '' then return redis.error_reply('ERR herald mark: bad arguments') end
-- A delete first: Redis at maxmemory refuses a script's first write that
-- may grow memory, and a give-back, a sign-out or a start must go on while
-- it is full.
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[1], ARGV[2] or '1', 'PX', ARGV[1])
return 1
`)

// setFieldScript sets a hash field while Redis is full too: a failing
// streak PutEndpoint ended before Redis refused the endpoint.
//
// KEYS[1] the hash.
// ARGV[1], ARGV[2] the field and its value.
var setFieldScript = newScript(`
-- A delete first, as in markScript.
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// finishScript ends the attempts of a batch of reserved notifications,
// grouped by shard: ack (succeeded), retry (scheduled again), dead, or
// release (given back without counting an attempt); or, for one cancelled
// while its attempt ran, cancelled (the attempt recorded, nothing else
// changed). A call holds one shard on a Cluster, any number on a single
// Redis.
//
// Go computes each new state line from the line it reserved the
// notification with, and the script swaps one for the other only if the
// stored line is still that one: a line names its reservation (receipt,
// deadline), so any change since, a reap or a cancel, makes the finish
// stale. A cancelled item's line is the cancelled one, which still holds
// the receipt until its attempt is recorded. The script parses no line,
// and each item names a group that says its action and what it counts, so
// that an item costs few arguments.
//
//	KEYS[1]      stats HASH that counts the moves
//	KEYS[2]      act HASH of this minute
//	KEYS[3..]    7 per shard: st HASH, reserved ZSET, hist HASH, finished
//	             ZSET, dead ZSET (every topic), order HASH, link HASH
//	then         ARGV[5] due ZSETs, then ARGV[6] dead ZSETs of topics, of
//	             any of the shards
//	ARGV[1]      now (ms)
//	ARGV[2]      expiry (ms) of what succeeds; "" keeps finished records
//	ARGV[3]      wake channel
//	ARGV[4]      number of shards
//	ARGV[5]      number of due keys
//	ARGV[6]      number of dead-topic keys
//	ARGV[7]      seconds the act hash is kept from now; 0 leaves its expiry
//	             alone (the caller set it already this minute)
//	ARGV[8]      number of groups
//	ARGV[9]      number of items with an order key
//	then         2 per shard: the shard, and how many of the items are its
//	then         per group: its action (ack, retry, dead, release or
//	             cancelled), the number of stats fields, each field and its
//	             change, then the same for act fields: what one finished
//	             item adds
//	then         5 per item with an order key: its number among the items,
//	             topic, order key, and the due keys (index) of the topic's
//	             push and pull queues in its shard, for the one waiting
//	             behind it
//	then         per item, shard by shard: id, the state line it was
//	             reserved with, its new line, its history field and entry
//	             ("" for none: an attempt given back before it started), its
//	             group; then for dead the dead key (index), for retry and
//	             release the next due (ms) and the due key (index)
//
// A notification with an order key that succeeds or dies ends its place in
// its key's line: the one behind it becomes due.
//
// Returns one code per item: OK, or STALE when the stored line is no longer
// the one it was reserved with: a late finish changes nothing.
var finishScript = newScript(`
local now, G = int_arg(ARGV[1], 0, 9007199254740991), int_arg(ARGV[4], 1, MAX_BATCH)
local nq, nt = int_arg(ARGV[5], 0, MAX_BATCH), int_arg(ARGV[6], 0, MAX_BATCH)
local keep, NC, NK = int_arg(ARGV[7], 0, 1e9), int_arg(ARGV[8], 0, MAX_BATCH), int_arg(ARGV[9], 0, MAX_BATCH)
local expires = ARGV[2]
if not now or not G or not nq or not nt or not keep or not NC or not NK or (expires ~= '' and not int_arg(expires, 0, 9007199254740991)) then
  return redis.error_reply('ERR herald finish: bad arguments')
end
local K = 2 + 7 * G
local b0 = 9 + 2 * G
-- Groups, by the index an item names them with: GX the action, GS and GA
-- the ARGV index of the first stats and act field, GN and GM how many.
local WIDTH = {ack = 5, dead = 6, retry = 7, release = 7, cancelled = 5}
local GX, GS, GN, GA, GM = {}, {}, {}, {}, {}
local function fields(at)
  local nf = int_arg(ARGV[at], 0, 64)
  if not nf then return nil end
  for f = at + 1, at + 2 * nf, 2 do
    if not ARGV[f] or ARGV[f] == '' or not int_arg(ARGV[f + 1], -MAX_BATCH, MAX_BATCH) then return nil end
  end
  return nf
end
for c = 1, NC do
  local x, key = ARGV[b0 + 1], tostring(c)
  local ns = WIDTH[x] and fields(b0 + 2)
  if not ns then return redis.error_reply('ERR herald finish: bad group ' .. c) end
  GX[key], GS[key], GN[key] = x, b0 + 3, ns
  b0 = b0 + 2 + 2 * ns
  local na = fields(b0 + 1)
  if not na then return redis.error_reply('ERR herald finish: bad group ' .. c) end
  GA[key], GM[key] = b0 + 2, na
  b0 = b0 + 1 + 2 * na
end
local keyed = {}
for j = 1, NK do
  local kb = b0 + 5 * (j - 1)
  keyed[tonumber(ARGV[kb + 1]) or 0] = kb
end
local B = b0 + 5 * NK
local total = 0
for g = 1, G do
  local c = int_arg(ARGV[9 + 2 * g], 1, MAX_BATCH)
  if ARGV[8 + 2 * g] == '' or not c then return redis.error_reply('ERR herald finish: bad arguments') end
  total = total + c
end
if total > MAX_BATCH or #KEYS ~= K + nq + nt then return redis.error_reply('ERR herald finish: bad arguments') end
-- QI and TI map each valid due and dead key index, as the caller writes
-- it, to its number: a lookup per item instead of parsing one.
local QI, TI = {}, {}
for j = 1, nq do QI[tostring(j)] = j end
for j = 1, nt do TI[tostring(j)] = j end
-- at[i] is where item i's arguments start.
local at, b = {}, B
for i = 1, total do
  local x = GX[ARGV[b + 6] or '']
  if not x or ARGV[b + 1] == '' or ARGV[b + 3] == '' or (x == 'dead' and not TI[ARGV[b + 7]])
    or ((x == 'retry' or x == 'release') and (not int_arg(ARGV[b + 7], 0, 9007199254740991) or not QI[ARGV[b + 8]])) then
    return redis.error_reply('ERR herald finish: bad item ' .. i)
  end
  at[i] = b
  b = b + 1 + WIDTH[x]
end
if b ~= #ARGV then return redis.error_reply('ERR herald finish: bad arguments') end
for j, kb in pairs(keyed) do
  if j < 1 or j > total or ARGV[kb + 3] == '' or not int_arg(ARGV[kb + 4], 1, nq) or not int_arg(ARGV[kb + 5], 1, nq) then
    return redis.error_reply('ERR herald finish: bad arguments')
  end
end
local codes, adds, dead, counts, deltas = {}, {}, {}, {}, {}
local first = 1
for g = 1, G do
  local k = 2 + 7 * (g - 1)
  local stkey, shard, last = KEYS[k + 1], ARGV[8 + 2 * g], first + tonumber(ARGV[9 + 2 * g]) - 1
  local ids, m = {}, 0
  for i = first, last do
    m = m + 1
    ids[m] = ARGV[at[i] + 1]
  end
  local states = redis.call('HMGET', stkey, unpack(ids))
  local unres, hist, sts, fin, deadall, heads = {}, {}, {}, {}, {}, {}
  local nu, nh, ns, nf, nd = 0, 0, 0, 0, 0
  for i = first, last do
    local b = at[i]
    if states[i - first + 1] ~= ARGV[b + 2] then
      codes[i] = STALE
    else
      codes[i] = OK
      local id, c = ARGV[b + 1], ARGV[b + 6]
      local action = GX[c]
      nu = nu + 1
      unres[nu] = id
      if ARGV[b + 4] ~= '' then
        hist[nh + 1], hist[nh + 2] = ARGV[b + 4], ARGV[b + 5]
        nh = nh + 2
      end
      sts[ns + 1], sts[ns + 2] = id, ARGV[b + 3]
      ns = ns + 2
      counts[c] = (counts[c] or 0) + 1
      if action == 'ack' then
        if expires ~= '' then
          nf = nf + 1
          fin[nf] = id
        end
      elseif action == 'dead' then
        deadall[nd + 1], deadall[nd + 2] = ARGV[1], id
        nd = nd + 2
        push(dead, TI[ARGV[b + 7]], ARGV[1], id)
      elseif action ~= 'cancelled' then
        due_add(adds, K + QI[ARGV[b + 8]], ARGV[b + 7], id, shard)
      end
      local kb = keyed[i]
      if kb and (action == 'ack' or action == 'dead') then
        heads[#heads + 1] = {id = id, topic = ARGV[kb + 2], key = ARGV[kb + 3],
          push = K + QI[ARGV[kb + 4]], pull = K + QI[ARGV[kb + 5]]}
      end
    end
  end
  if nu > 0 then
    release(KEYS[k + 6], KEYS[k + 7], stkey, heads, now, adds, deltas, sts, shard)
    redis.call('ZREM', KEYS[k + 2], unpack(unres))
    if nh > 0 then redis.call('HSET', KEYS[k + 3], unpack(hist)) end
    redis.call('HSET', stkey, unpack(sts))
    if nf > 0 then redis.call('ZADD', KEYS[k + 4], expires, ARGV[1] .. '|' .. table.concat(fin, ' ')) end
    if nd > 0 then redis.call('ZADD', KEYS[k + 5], unpack(deadall)) end
  end
  first = last + 1
end
-- Each group's changes times its count, summed by field.
local sums, asums = {}, {}
for c, cnt in pairs(counts) do
  for f = GS[c], GS[c] + 2 * GN[c] - 1, 2 do sums[ARGV[f]] = (sums[ARGV[f]] or 0) + cnt * tonumber(ARGV[f + 1]) end
  for f = GA[c], GA[c] + 2 * GM[c] - 1, 2 do asums[ARGV[f]] = (asums[ARGV[f]] or 0) + cnt * tonumber(ARGV[f + 1]) end
end
for f, v in pairs(sums) do
  if v ~= 0 then redis.call('HINCRBY', KEYS[1], f, string.format('%d', v)) end
end
local acted = false
for f, v in pairs(asums) do
  if v ~= 0 then
    redis.call('HINCRBY', KEYS[2], f, string.format('%d', v))
    acted = true
  end
end
if acted and keep > 0 then redis.call('EXPIRE', KEYS[2], keep) end
due_flush(adds, ARGV[3])
for t, l in pairs(dead) do redis.call('ZADD', KEYS[K + nq + t], unpack(l)) end
flush(KEYS[1], deltas)
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
// behind it moves up, and becomes due when it was the head. A reserved one
// is announced on the wake channel as "cancel <id> <receipt>", and keeps
// its receipt and deadline in its cancelled line, so that the attempt
// under way, which goes on, can still be recorded (finish, as
// "cancelled").
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
  -- A dispatcher may hold it reserved ahead of a busy worker: it drops
  -- it on hearing this, rather than attempt what was cancelled.
  redis.call('PUBLISH', ARGV[5], 'cancel ' .. id .. ' ' .. o.r)
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
o.s, o.na, o.ua = 'C', '', ARGV[2]
local line = st_line(o)
sts[#sts + 1] = id
sts[#sts + 1] = line
redis.call('HSET', KEYS[2], unpack(sts))
due_flush(adds, ARGV[5])
if retention > 0 then redis.call('ZADD', KEYS[6], string.format('%d', now + retention), ARGV[2] .. '|' .. id) end
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
// Without a reset the notification goes on where its backoff array
// stopped: one that used the whole array gets one more attempt, and goes
// dead again if that fails; one that died early, of a permanent failure,
// gets the attempts left in it. With a reset the whole array runs again. The
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

// purgeScript deletes dead notifications of one shard: those an operator
// purges, and those the sweep finds dead longer than their retention.
//
//	KEYS[1]   job HASH
//	KEYS[2]   st HASH
//	KEYS[3]   hist HASH
//	KEYS[4]   dead ZSET (every topic)
//	KEYS[5]   stats HASH
//	KEYS[6..] dead ZSETs of topics
//	ARGV[1]   the latest time of death (ms) to delete; "" for any
//	ARGV[2..] 2 per id (a bounded batch): id, and the KEYS index of its
//	          topic's dead ZSET, or 0 for an entry of the every-topic set
//	          whose record is gone, which is deleted alone
//
// An id is deleted only if its topic's set holds it, dead no later than
// ARGV[1]: one replayed since is not dead, and one that died again since
// is dead from its new time. It leaves both sets, its record, its history
// and its topic's dead count. Returns {how many were deleted, ids with an
// order key among them...}: the caller deletes their stubs. Ids not dead in
// their topic are skipped, but for the sweep's (ARGV[1] set): an id its
// topic's set lacks whose every-topic entry is due is a stale entry, which
// goes (below).
var purgeScript = newScript(`
local upto, NT, n = ARGV[1], #KEYS - 5, (#ARGV - 1) / 2
if (upto ~= '' and not int_arg(upto, -9007199254740991, 9007199254740991)) or NT < 0 or n < 1 or n > MAX_BATCH or n % 1 ~= 0 then
  return redis.error_reply('ERR herald purge: bad arguments')
end
upto = tonumber(upto)
local topics = {}
for k = 1, NT do
  topics[k] = string.match(KEYS[5 + k], '^.*:dead:(.+)$')
  if not topics[k] then return redis.error_reply('ERR herald purge: bad arguments') end
end
-- byKey lists, per dead key index (0 for the every-topic set), the ids
-- that name it.
local byKey = {}
for i = 1, n do
  local id, k = ARGV[2 * i], int_arg(ARGV[2 * i + 1], 0, NT)
  if id == '' or not k then return redis.error_reply('ERR herald purge: bad item ' .. i) end
  push(byKey, k, id)
end
local gone, orphans, hist, deltas, keyed, rm, seen, stale, staleKey = {}, {}, {}, {}, {}, {}, {}, {}, {}
for k, l in pairs(byKey) do
  local scores = redis.call('ZMSCORE', KEYS[k == 0 and 4 or 5 + k], unpack(l))
  local contents = k == 0 and redis.call('HMGET', KEYS[1], unpack(l)) or {}
  for i, id in ipairs(l) do
    if scores[i] and not seen[id] and (not upto or tonumber(scores[i]) <= upto) then
      seen[id] = true
      if k > 0 then
        gone[#gone + 1] = id
        push(rm, k, id)
        bump(deltas, topics[k], 'dead', -1)
      elseif not contents[i] or string.sub(contents[i], 1, 1) == '@' then
        orphans[#orphans + 1] = id
      end
    elseif k > 0 and upto and not scores[i] and not seen[id] then
      seen[id] = true
      stale[#stale + 1] = id
      staleKey[id] = k
    end
  end
end
-- A dead notification is in both sets from one time of death. The sweep
-- reads the every-topic set's oldest entries: one whose topic's set lacks
-- it (written by hand, or left by an older version) would come back at
-- the head of every sweep and hold up the dead letters behind it. So it
-- goes: its entry alone where its record is not dead (its id was enqueued
-- again), and with its record where that is dead, as the sweep deletes
-- dead letters: the topic's dead count is of dead records.
if #stale > 0 then
  local all = redis.call('ZMSCORE', KEYS[4], unpack(stale))
  local states = redis.call('HMGET', KEYS[2], unpack(stale))
  for i, id in ipairs(stale) do
    if all[i] and tonumber(all[i]) <= upto then
      local o = st_parse(states[i])
      if o and o.s == 'D' then
        gone[#gone + 1] = id
        bump(deltas, topics[staleKey[id]], 'dead', -1)
      else
        orphans[#orphans + 1] = id
      end
    end
  end
end
if #gone > 0 then
  local states = redis.call('HMGET', KEYS[2], unpack(gone))
  for i, id in ipairs(gone) do
    local o = st_parse(states[i])
    if o then
      hist_fields(hist, id, o.h)
      if o.x ~= '' then keyed[#keyed + 1] = id end
    end
  end
  for k, l in pairs(rm) do redis.call('ZREM', KEYS[5 + k], unpack(l)) end
  redis.call('ZREM', KEYS[4], unpack(gone))
  redis.call('HDEL', KEYS[1], unpack(gone))
  redis.call('HDEL', KEYS[2], unpack(gone))
  if #hist > 0 then chunked('HDEL', KEYS[3], hist) end
  flush(KEYS[5], deltas)
end
if #orphans > 0 then redis.call('ZREM', KEYS[4], unpack(orphans)) end
return {#gone + #orphans, unpack(keyed)}
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
// A finished entry is "ua|id id ...": the notifications a finish call
// acknowledged together in the shard (or one a cancel ended), ua the time
// of that finish, which their state lines hold. One whose line no longer
// does was replaced and finished again, or is waiting again: a later entry
// sweeps it, or none. An entry written before entries held batches is a
// bare id, deleted as it is (enqueue's replace removes those). The entries
// due are taken until they hold limit ids, so that a call deletes fewer
// than limit plus a finish batch (MAX_BATCH).
//
// Returns {more, how many were deleted, ids with an order key among
// them...}: more is 1 when due entries may be left, whatever was deleted
// (the entries taken may all name records changed since); the caller
// deletes the stubs.
var sweepScript = newScript(`
local limit = int_arg(ARGV[2], 1, MAX_BATCH)
if not int_arg(ARGV[1], 0, 9007199254740991) or not limit then
  return redis.error_reply('ERR herald sweep: bad arguments')
end
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, limit)
if #entries == 0 then return {0, 0} end
local ids, uas, taken = {}, {}, 0
for _, e in ipairs(entries) do
  taken = taken + 1
  local ua, list = string.match(e, '^(%d+)|(.*)$')
  if ua then
    for id in string.gmatch(list, '%S+') do
      ids[#ids + 1] = id
      uas[#ids] = ua
    end
  else
    ids[#ids + 1] = e
    uas[#ids] = false
  end
  if #ids >= limit then break end
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, taken - 1)
local more = (taken < #entries or #entries == limit) and 1 or 0
if #ids == 0 then return {more, 0} end
local states = redis.call('HMGET', KEYS[3], unpack(ids))
local gone, hist, keyed = {}, {}, {}
for i, id in ipairs(ids) do
  local o = st_parse(states[i])
  if not uas[i] or (o and o.ua == uas[i] and (o.s == 'K' or o.s == 'C')) then
    gone[#gone + 1] = id
    if o then
      hist_fields(hist, id, o.h)
      if o.x ~= '' then keyed[#keyed + 1] = id end
    end
  end
end
if #gone == 0 then return {more, 0} end
redis.call('HDEL', KEYS[2], unpack(gone))
redis.call('HDEL', KEYS[3], unpack(gone))
if #hist > 0 then chunked('HDEL', KEYS[4], hist) end
return {more, #gone, unpack(keyed)}
`)

// quarantineScript moves a reserved notification whose record cannot be
// decoded out of the way, so that it stops every batch it falls in. When its
// header still names its topic, the topic's reserved gauge is lowered, and
// the line of its order key, if it has one, moves on without it. Its
// history goes, when its state line says how long it is: nothing could
// read it without the record, and a later notification of the id would
// not delete it. A reservation whose record is gone is only taken out of
// the reserved set, where it came first at every reap.
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
//	KEYS[10] hist HASH
//	ARGV[1]  id
//	ARGV[2]  why
//	ARGV[3]  now (ms)
//	ARGV[4]  wake channel
//	ARGV[5]  shard
//	ARGV[6]  retention (ms; -1, or 0 under a millisecond, keeps the hash for ever): the
//	         hash, which holds payloads, expires that long after the last
//	         notification moved there
//	ARGV[7]  the content found undecodable ("" when there was none)
//	ARGV[8]  the state line found with it ("" when there was none)
//	ARGV[9]  the topic KEYS[9] is of
//
// Returns {1} when the notification was moved, {2} when a reservation
// without a record was dropped, {0} when the record changed since it was
// read (the next reap reads it again), or {3, topic} when the header names
// a topic other than ARGV[9]: call again with its keys.
var quarantineScript = newScript(`
local now, keep = int_arg(ARGV[3], 0, 9007199254740991), int_arg(ARGV[6], -1, 9007199254740991)
if ARGV[1] == '' or not now or not keep then return redis.error_reply('ERR herald quarantine: bad arguments') end
local id = ARGV[1]
local c = redis.call('HGET', KEYS[1], id)
local line = redis.call('HGET', KEYS[2], id)
if (c or '') ~= ARGV[7] or (line or '') ~= ARGV[8] then return {0} end
if not c then return {2 * redis.call('ZREM', KEYS[4], id)} end
local topic = select(3, route(c))
if topic and topic ~= ARGV[9] then return {3, topic} end
local o = st_parse(line)
-- Deletes first: Redis at maxmemory refuses a script's first write that
-- may grow memory, and lets the rest through once it has written.
redis.call('HDEL', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HSET', KEYS[3], id, ARGV[2] .. '\n' .. c)
if keep > 0 then redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
if o then
  local hist = {}
  hist_fields(hist, id, o.h)
  if #hist > 0 then chunked('HDEL', KEYS[10], hist) end
end
local deltas, adds, sts = {}, {}, {}
if redis.call('ZREM', KEYS[4], id) == 1 and topic then bump(deltas, topic, 'reserved', -1) end
if topic and o and o.x ~= '' then
  release(KEYS[6], KEYS[7], KEYS[2], {{id = id, topic = topic, key = o.x, push = 8, pull = 9}}, now, adds, deltas, sts, ARGV[5])
  if #sts > 0 then redis.call('HSET', KEYS[2], unpack(sts)) end
  due_flush(adds, ARGV[4])
end
flush(KEYS[5], deltas)
return {1}
`)

// deadPageScript reads one dead ZSET in (time of death, id) order after a
// cursor; it writes nothing. Redis orders the members of one score by their
// bytes: the script finds the cursor's place among them by bisection, with
// a comparison of bytes too (Lua's < follows the server's locale), so a
// page costs O(log n) however many died in one millisecond.
//
//	KEYS[1]  a dead ZSET
//	ARGV[1]  cursor score ("" to start)
//	ARGV[2]  cursor id
//	ARGV[3]  limit, up to a page of MAX_BATCH and one more, which tells
//	         whether another page follows
//
// Returns {id, score, ...}: up to limit entries after (score, id).
var deadPageScript = newScript(`
local limit = int_arg(ARGV[3], 1, MAX_BATCH + 1)
if not limit or (ARGV[1] ~= '' and not int_arg(ARGV[1], -2^53, 2^53)) then
  return redis.error_reply('ERR herald dead page: bad arguments')
end
local from = 0
if ARGV[1] ~= '' then
  local function after(a, b)
    for i = 1, math.min(#a, #b) do
      local x, y = string.byte(a, i), string.byte(b, i)
      if x ~= y then return x > y end
    end
    return #a > #b
  end
  local lo = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
  local hi = lo + redis.call('ZCOUNT', KEYS[1], ARGV[1], ARGV[1])
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if after(redis.call('ZRANGE', KEYS[1], mid, mid)[1], ARGV[2]) then hi = mid else lo = mid + 1 end
  end
  from = lo
end
return redis.call('ZRANGE', KEYS[1], from, from + limit - 1, 'WITHSCORES')
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
// Returns per id {OK} (the stub is written), {OK, 1} (it was there
// already), {MOVED, stub} (another stub is), or {EXISTS} (a notification
// without an order key holds the id here).
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
      codes[#codes + 1] = {OK}
    else
      codes[#codes + 1] = {OK, 1}
    end
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
// leaving an id alone that has been enqueued again since with another key.
//
//	KEYS[1]  job HASH of the ids' shard
//	ARGV     2 per id: id, stub
//
// Returns the ids whose stubs it deleted.
var dropStubScript = newScript(`
if #ARGV % 2 ~= 0 or #ARGV > 2 * MAX_BATCH then return redis.error_reply('ERR herald drop stub: bad arguments') end
local gone = {}
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then gone[#gone + 1] = ARGV[i] end
end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
return gone
`)
