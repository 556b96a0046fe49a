package store

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// deadBatch bounds the ids one replay or purge script moves.
const deadBatch = 500

// DeadFilter selects dead notifications: by IDs, or by Topic and the time
// they died, from Since (inclusive) to Until (exclusive); nil is no bound.
// A bound is a pointer so that no time, not even the zero time a caller's
// 0001-01-01T00:00:00Z parses to, can stand for "no bound" and widen a
// purge to the whole topic.
type DeadFilter struct {
	IDs   []string
	Topic string
	Since *time.Time
	Until *time.Time
}

func (f *DeadFilter) validate() error {
	if len(f.IDs) == 0 && f.Topic == "" {
		return notify.Errorf("topic", "give ids, or a topic with an optional since and until")
	}
	if len(f.IDs) > 0 && f.Topic != "" {
		return notify.Errorf("ids", "give ids or a topic, not both")
	}
	// A window narrows a topic's selection: with ids it would be ignored,
	// and more done than was asked.
	if len(f.IDs) > 0 && f.Since != nil {
		return notify.Errorf("since", "goes with a topic, not with ids")
	}
	if len(f.IDs) > 0 && f.Until != nil {
		return notify.Errorf("until", "goes with a topic, not with ids")
	}
	if f.Topic != "" && !notify.ValidTopic(f.Topic) {
		return notify.Errorf("topic", "must match [a-z0-9._-]{1,64}")
	}
	for _, b := range []struct {
		field string
		at    *time.Time
	}{{"since", f.Since}, {"until", f.Until}} {
		switch {
		case b.at == nil:
		case b.at.Before(time.Unix(0, 0)):
			return notify.Errorf(b.field, "must be 1970-01-01T00:00:00Z or later: nothing died before that")
		case b.at.After(time.UnixMilli(maxScoreMS)):
			// Its milliseconds would not fit a score, or would wrap around.
			return notify.Errorf(b.field, "is later than the store can hold")
		}
	}
	if f.Since != nil && f.Until != nil && !f.Until.After(*f.Since) {
		return notify.Errorf("until", "must be after since")
	}
	return nil
}

// deadCursor is where a dead listing stopped: the last returned entry, in
// the listing's (time of death, id) order.
type deadCursor struct {
	Score int64  `json:"c"`
	ID    string `json:"i"`
}

// ListDead returns up to limit dead notifications (all topics when topic is
// empty), oldest death first, and the cursor of the next page ("" when
// there is none). Pass "" to start. A page costs two round trips whatever
// the number of topics: one that reads every shard's next entries after the
// cursor, merged here, and one that reads the records.
func (s *Store) ListDead(ctx context.Context, topic string, limit int, cursor string) ([]*notify.Notification, string, error) {
	if err := s.open(ctx); err != nil {
		return nil, "", err
	}
	limit = min(max(limit, 1), MaxBatch)
	after := []any{"", "", limit + 1}
	if cursor != "" {
		var cur deadCursor
		b, err := base64.RawURLEncoding.DecodeString(cursor)
		// The score bound keeps a forged cursor from the script, which
		// would refuse it as a failure of the store.
		if err != nil || json.Unmarshal(b, &cur) != nil || cur.ID == "" || cur.Score < -maxScoreMS || cur.Score > maxScoreMS {
			return nil, "", notify.Errorf("cursor", "is not a cursor this server returned")
		}
		after = []any{strconv.FormatInt(cur.Score, 10), cur.ID, limit + 1}
	}
	if topic != "" && !notify.ValidTopic(topic) {
		return nil, "", notify.Errorf("topic", "must match [a-z0-9._-]{1,64}")
	}
	calls := make([]*scriptCall, s.keys.shards)
	for shard := range calls {
		key := s.keys.deadAll(shard)
		if topic != "" {
			key = s.keys.dead(shard, topic)
		}
		calls[shard] = &scriptCall{script: deadPageScript, keys: []string{key}, args: after}
	}
	if err := s.runScripts(ctx, calls); err != nil {
		return nil, "", fmt.Errorf("list dead: %w", err)
	}
	type entry struct {
		score int64
		id    string
	}
	var all []entry
	for _, c := range calls {
		v, err := c.cmd.Result()
		if err != nil {
			return nil, "", fmt.Errorf("list dead: %w", err)
		}
		l, _ := v.([]any)
		for i := 0; i+1 < len(l); i += 2 {
			score, _ := strconv.ParseInt(replyString(l[i+1]), 10, 64)
			all = append(all, entry{score, replyString(l[i])})
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Or(cmp.Compare(a.score, b.score), cmp.Compare(a.id, b.id)) })
	next := ""
	if len(all) > limit {
		all = all[:limit]
		b, _ := json.Marshal(deadCursor{Score: all[limit-1].score, ID: all[limit-1].id})
		next = base64.RawURLEncoding.EncodeToString(b)
	}
	ids := make([]string, len(all))
	for i, e := range all {
		ids[i] = e.id
	}
	got, err := s.getMany(ctx, ids, true)
	if err != nil {
		return nil, "", fmt.Errorf("list dead: %w", err)
	}
	out := make([]*notify.Notification, 0, len(got))
	for _, n := range got {
		if n != nil { // replayed or purged between the two reads
			out = append(out, n)
		}
	}
	return out, next, nil
}

// DeadCursorAt returns a ListDead cursor that starts the listing at the
// notifications that died at t or later, so that a browser filtering by
// time of death need not page through the earlier ones.
func DeadCursorAt(t time.Time) string {
	// Ids never contain '~', the character after every one they may use:
	// the entries one millisecond before t all sort before this cursor.
	b, _ := json.Marshal(deadCursor{Score: t.UnixMilli() - 1, ID: "~"})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DeadOptions tune Replay and Purge.
type DeadOptions struct {
	// Reset, for Replay, runs the whole backoff array again. Without it each
	// notification goes on where its array stopped: one more attempt for
	// one that used the whole array, the attempts left for one that died
	// of a permanent failure, which the operator has presumably fixed.
	Reset bool
	// DryRun changes nothing: only what matches is counted.
	DryRun bool
	// Progress, when set, is called after each batch with the running
	// totals, so a long replay can show how far it got.
	Progress func(matched, done int)
}

// Replay moves the dead notifications f selects back to their queue, due
// now, and returns how many matched and how many it moved.
func (s *Store) Replay(ctx context.Context, f DeadFilter, opts DeadOptions) (matched, replayed int, err error) {
	if err := s.open(ctx); err != nil {
		return 0, 0, err
	}
	now := ms(s.Now())
	k := &s.keys
	return s.eachDead(ctx, f, opts, func(shard int, topic string, ids []string) *scriptCall {
		args := []any{now, boolArg(opts.Reset), k.wake(), shard, topic}
		for _, id := range ids {
			args = append(args, id)
		}
		return &scriptCall{
			script: replayScript,
			keys: []string{k.state(shard), k.deadAll(shard), k.dead(shard, topic), k.due(shard, QueuePush),
				k.due(shard, PullQueue(topic)), k.stats(shard), k.order(shard), k.link(shard)},
			args: args,
		}
	})
}

// Purge deletes the dead notifications f selects, for good, and returns
// how many matched and how many it deleted.
func (s *Store) Purge(ctx context.Context, f DeadFilter, opts DeadOptions) (matched, purged int, err error) {
	if err := s.open(ctx); err != nil {
		return 0, 0, err
	}
	return s.eachDead(ctx, f, opts, func(shard int, topic string, ids []string) *scriptCall {
		return s.purgeCall(shard, "", map[string][]string{topic: ids}, nil)
	})
}

// purgeCall builds the call that deletes the dead notifications of shard
// listed by topic, those of them that died at upto (ms) or before ("" for
// any), and the entries orphans of the every-topic set whose records are
// gone.
func (s *Store) purgeCall(shard int, upto string, byTopic map[string][]string, orphans []string) *scriptCall {
	k := &s.keys
	keyList := []string{k.job(shard), k.state(shard), k.hist(shard), k.deadAll(shard), k.stats(shard)}
	args := []any{upto}
	for _, topic := range slices.Sorted(maps.Keys(byTopic)) {
		keyList = append(keyList, k.dead(shard, topic))
		for _, id := range byTopic[topic] {
			args = append(args, id, len(keyList)-5)
		}
	}
	for _, id := range orphans {
		args = append(args, id, 0)
	}
	return &scriptCall{script: purgeScript, keys: keyList, args: args}
}

// eachDead finds the dead notifications f selects in bounded batches and runs
// the script newCall builds on each batch.
func (s *Store) eachDead(ctx context.Context, f DeadFilter, opts DeadOptions, newCall func(shard int, topic string, ids []string) *scriptCall) (matched, done int, err error) {
	if err := f.validate(); err != nil {
		return 0, 0, err
	}
	run := func(shard int, topic string, ids []string) error {
		matched += len(ids)
		if opts.Progress != nil && len(ids) > 0 {
			defer func() { opts.Progress(matched, done) }()
		}
		if opts.DryRun || len(ids) == 0 {
			return nil
		}
		c := newCall(shard, topic, ids)
		v, err := s.runAckedScript(ctx, c.script, c.keys, c.args...)
		if err != nil {
			return err
		}
		n, keyed, err := replyDeleted(v)
		done += n
		if err == nil {
			s.dropStubs(ctx, shard, keyed)
		}
		return err
	}
	if len(f.IDs) > 0 {
		groups, err := s.deadByID(ctx, f.IDs)
		if err != nil {
			return 0, 0, err
		}
		for _, g := range groups {
			for chunk := range slices.Chunk(g.ids, deadBatch) {
				if err := run(g.shard, g.topic, chunk); err != nil {
					return matched, done, fmt.Errorf("dead-letter batch: %w", err)
				}
			}
		}
		return matched, done, nil
	}
	minScore, maxScore := "-inf", strconv.FormatInt(ms(s.Now()), 10)
	if f.Since != nil {
		minScore = strconv.FormatInt(ms(*f.Since), 10)
	}
	if f.Until != nil {
		// Until is exclusive; a replayed notification that dies again during
		// the run gets a later score and is not picked up twice, because an
		// open range is closed at the start time.
		maxScore = "(" + strconv.FormatInt(ms(*f.Until), 10)
	}
	if opts.DryRun {
		n, err := s.countDead(ctx, f.Topic, minScore, maxScore)
		if err == nil && opts.Progress != nil {
			opts.Progress(n, 0)
		}
		return n, 0, err
	}
	for shard := 0; shard < s.keys.shards; shard++ {
		key := s.keys.dead(shard, f.Topic)
		for {
			ids, err := s.client.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: minScore, Max: maxScore, Count: deadBatch}).Result()
			if err != nil {
				return matched, done, fmt.Errorf("dead-letter batch: %w", err)
			}
			before := done
			if err := run(shard, f.Topic, ids); err != nil {
				return matched, done, fmt.Errorf("dead-letter batch: %w", err)
			}
			// A batch that moved nothing would come back the same: stop.
			if len(ids) < deadBatch || done == before {
				break
			}
		}
	}
	return matched, done, nil
}

// countDead counts a topic's dead notifications that died in [min, max],
// in one pipeline.
func (s *Store) countDead(ctx context.Context, topic, minScore, maxScore string) (int, error) {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.IntCmd, s.keys.shards)
	for shard := range cmds {
		cmds[shard] = pipe.ZCount(ctx, s.keys.dead(shard, topic), minScore, maxScore)
	}
	if _, err := s.exec(ctx, pipe); err != nil {
		return 0, fmt.Errorf("count dead: %w", err)
	}
	total := 0
	for _, c := range cmds {
		total += int(c.Val())
	}
	return total, nil
}

type deadGroup struct {
	shard int
	topic string
	ids   []string
}

// deadByID finds the dead ones among ids and groups them by shard and
// topic, the keys their scripts need. The topics are read from the content
// headers inside Redis, so no payload travels; an id whose notification
// lives in its order key's shard is followed there.
func (s *Store) deadByID(ctx context.Context, ids []string) ([]deadGroup, error) {
	var at []located
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		if notify.ValidID(id) {
			at = append(at, located{id: id, shard: s.keys.shardOf(id)})
		}
	}
	at, err := s.locate(ctx, at)
	if err != nil {
		return nil, fmt.Errorf("read dead notifications: %w", err)
	}
	pipe := s.client.Pipeline()
	states := make([]*redis.StringCmd, len(at))
	for i, l := range at {
		states[i] = pipe.HGet(ctx, s.keys.state(l.shard), l.id)
	}
	if len(at) == 0 {
		return nil, nil
	}
	if _, err := s.exec(ctx, pipe); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read dead notifications: %w", err)
	}
	index := map[[2]string]int{}
	var groups []deadGroup
	for i, l := range at {
		st, err := parseState(states[i].Val())
		if err != nil || st.state != notify.StateDead {
			continue
		}
		key := [2]string{strconv.Itoa(l.shard), l.topic}
		g, ok := index[key]
		if !ok {
			g = len(groups)
			index[key] = g
			groups = append(groups, deadGroup{shard: l.shard, topic: l.topic})
		}
		groups[g].ids = append(groups[g].ids, l.id)
	}
	return groups, nil
}

// located is a notification found: its shard and topic.
type located struct {
	id, topic string
	shard     int
}

// locate fills in the topic of each id in at from its content's header,
// following the stubs of notifications that live in their order key's
// shard; unknown ids are left out.
func (s *Store) locate(ctx context.Context, at []located) ([]located, error) {
	var out []located
	for try := 0; len(at) > 0 && try < 2; try++ {
		byShard := map[int][]located{}
		for _, l := range at {
			byShard[l.shard] = append(byShard[l.shard], l)
		}
		var calls []*scriptCall
		var lists [][]located
		for _, shard := range sortedKeys(byShard) {
			for chunk := range slices.Chunk(byShard[shard], maxScriptBatch) {
				args := make([]any, len(chunk))
				for i, l := range chunk {
					args[i] = l.id
				}
				calls = append(calls, &scriptCall{script: headersScript, keys: []string{s.keys.job(shard)}, args: args})
				lists = append(lists, chunk)
			}
		}
		if err := s.runScripts(ctx, calls); err != nil {
			return nil, err
		}
		at = nil
		for c, call := range calls {
			v, err := call.cmd.Result()
			if err != nil {
				return nil, err
			}
			topics, _ := v.([]any)
			for i, t := range topics {
				if i >= len(lists[c]) {
					break
				}
				l := lists[c][i]
				switch topic := replyString(t); {
				case topic == "":
				case strings.HasPrefix(topic, "@"):
					if shard, ok := stubShard(topic); ok && shard < s.keys.shards && try == 0 {
						at = append(at, located{id: l.id, shard: shard})
					}
				default:
					l.topic = topic
					out = append(out, l)
				}
			}
		}
	}
	return out, nil
}

// replyDeleted reads the reply of a script that deletes records: a count
// (replay), or the count and the ids with an order key (purge, sweep).
func replyDeleted(v any) (int, []string, error) {
	if n, ok := v.(int64); ok {
		return int(n), nil, nil
	}
	l, err := replyList(v, 1)
	if err != nil {
		return 0, nil, err
	}
	n, err := replyInt(l[0])
	keyed := make([]string, 0, len(l)-1)
	for _, id := range l[1:] {
		keyed = append(keyed, replyString(id))
	}
	return int(n), keyed, err
}

// dropStubs deletes the stubs that led to records of shard that are gone.
// A stub left behind by a failure here is harmless: Get finds nothing
// behind it, and the next enqueue of the id replaces it.
//
// The id may have been enqueued again, with the same key, since its record
// was deleted: the enqueue found the stub in place, kept it, and wrote the
// new record. So a stub deleted here is written again where its shard holds
// a record by now; and an enqueue that kept a stub and wrote a new record
// writes the stub again itself (keepStubs), for when this ran between the
// two.
func (s *Store) dropStubs(ctx context.Context, shard int, ids []string) {
	calls := s.stubCalls(dropStubScript, shard, ids)
	if len(calls) == 0 {
		return
	}
	if err := s.runScripts(ctx, calls); err != nil {
		s.cfg.Logger.WarnContext(ctx, "store: could not delete the stubs of removed notifications", "error", err)
		return
	}
	var dropped []string
	for _, c := range calls {
		l, _ := c.cmd.Slice()
		for _, id := range l {
			dropped = append(dropped, replyString(id))
		}
	}
	if len(dropped) == 0 {
		return
	}
	pipe := s.client.Pipeline()
	found := make([]*redis.BoolCmd, len(dropped))
	for i, id := range dropped {
		found[i] = pipe.HExists(ctx, s.keys.job(shard), id)
	}
	if _, err := s.exec(ctx, pipe); err != nil {
		s.cfg.Logger.WarnContext(ctx, "store: could not check the records of deleted stubs", "error", err)
		return
	}
	var back []string
	for i, id := range dropped {
		if found[i].Val() {
			back = append(back, id)
		}
	}
	s.restoreStubs(ctx, shard, back)
}

// restoreStubs writes again the stubs that lead ids to shard, where their
// records are.
func (s *Store) restoreStubs(ctx context.Context, shard int, ids []string) {
	calls := s.stubCalls(stubScript, shard, ids, "0")
	if len(calls) == 0 {
		return
	}
	if err := s.runScripts(ctx, calls); err != nil {
		s.cfg.Logger.ErrorContext(ctx, "store: could not write the stubs of keyed notifications", "shard", shard, "error", err)
		return
	}
	for _, c := range calls {
		codes, _, err := replyCodes(c, len(c.args)/3)
		for i, code := range codes {
			if err == nil && code != codeOK {
				// Someone took the id elsewhere while its stub was gone:
				// Get and Cancel now find that notification, not this one.
				err = fmt.Errorf("the id %s was taken elsewhere", replyString(c.args[3*i]))
			}
		}
		if err != nil {
			s.cfg.Logger.ErrorContext(ctx, "store: could not write the stubs of keyed notifications", "shard", shard, "error", err)
		}
	}
}

// stubCalls makes one call of script per shard holding the stubs of ids
// that lead to shard: each id with its stub, then extra.
func (s *Store) stubCalls(script *redis.Script, shard int, ids []string, extra ...any) []*scriptCall {
	byHome := map[int][]any{}
	for _, id := range ids {
		if home := s.keys.shardOf(id); home != shard {
			byHome[home] = append(append(byHome[home], id, stub(shard)), extra...)
		}
	}
	calls := make([]*scriptCall, 0, len(byHome))
	for _, home := range sortedKeys(byHome) {
		calls = append(calls, &scriptCall{script: script, keys: []string{s.keys.job(home)}, args: byHome[home]})
	}
	return calls
}
