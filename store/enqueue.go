package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// MaxBatch bounds the notifications of one EnqueueBatch call.
const MaxBatch = 1000

// EnqueueStatus says what an enqueue did.
type EnqueueStatus int

// What an enqueue did; the API answers 201 for Created, 200 for Existing and
// Replaced.
const (
	Created EnqueueStatus = iota + 1
	// Existing: the id was already stored with the same content; the
	// existing record is returned and nothing changed.
	Existing
	// Replaced: the id was stored with other content and Replace asked to
	// reschedule it; it starts again from attempt 0 with an empty history.
	Replaced
)

// EnqueueRequest is one notification to store.
type EnqueueRequest struct {
	// Notification is resolved and validated (policy.Set.Resolve), with its
	// Digest set. The store takes it over: a new one is completed in place
	// as the stored record and returned in EnqueueResult.Notification.
	Notification *notify.Notification
	// Replace reschedules an existing notification of the same id and other
	// content, unless it is reserved.
	Replace bool
	// Attempts is how many attempts were made before the notification came
	// to Herald (an import from another system): its next attempt has that
	// index. Default 0.
	Attempts int
	// Dead, when set, stores the notification straight in the dead-letter
	// set with this one history entry (an import of work that already
	// failed for good), to be replayed or purged like any dead one.
	Dead *notify.Attempt
}

// EnqueueResult is the outcome of one EnqueueRequest.
type EnqueueResult struct {
	Status EnqueueStatus
	// Notification is the stored record: the new one, or the existing one
	// for Existing and for the errors notify.ErrConflict and
	// notify.ErrReserved.
	Notification *notify.Notification
	Err          error
}

// Enqueue stores one notification; see EnqueueBatch. Calls made at the same
// time from many goroutines are written together, in one script on a single
// Redis and one per shard on a Cluster, in one round trip, while each caller
// still gets its own answer: under load
// the store pays per batch, not per notification.
func (s *Store) Enqueue(ctx context.Context, n *notify.Notification, replace bool) (*notify.Notification, EnqueueStatus, error) {
	if err := s.open(ctx); err != nil {
		return nil, 0, err
	}
	res, err := s.batcher.do(ctx, EnqueueRequest{Notification: n, Replace: replace})
	if err != nil {
		return nil, 0, err
	}
	return res.Notification, res.Status, res.Err
}

// EnqueueBatch stores up to MaxBatch notifications in one pipeline: one
// script per shard, one round trip per Redis node. Each notification's first
// attempt is due at SendAt + Backoff[0], rounded up to the millisecond, never
// earlier. An id that exists with the same content returns the stored record
// (Existing); with other content it is notify.ErrConflict unless Replace is
// set, and notify.ErrOtherShard where the replacement would live in another
// shard than the notification (another order key, say; never on a store of
// one shard). A due time the store cannot hold exactly is a *notify.FieldError
// naming send_at. An id given more than once is decided as if each were
// enqueued after the ones before it (a replace of one, in a pipeline of its
// own). The returned error is for a failure of the whole batch; per-item
// outcomes are in the results.
//
// A batch of one is written together with the other single enqueues made at
// the same time, as Enqueue's are.
func (s *Store) EnqueueBatch(ctx context.Context, reqs []EnqueueRequest) ([]EnqueueResult, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	if len(reqs) == 1 {
		res, err := s.batcher.do(ctx, reqs[0])
		if err != nil {
			return nil, err
		}
		return []EnqueueResult{res}, nil
	}
	return s.enqueueBatch(ctx, reqs)
}

// enqueueBatch writes reqs at once; see EnqueueBatch.
func (s *Store) enqueueBatch(ctx context.Context, reqs []EnqueueRequest) ([]EnqueueResult, error) {
	if len(reqs) > MaxBatch {
		return nil, fmt.Errorf("enqueue: %d notifications, more than %d", len(reqs), MaxBatch)
	}
	now := s.Now()
	results := make([]EnqueueResult, len(reqs))
	// The items live in one array: a batch of 100 then costs one
	// allocation instead of 100.
	backing := make([]enqueueItem, 0, len(reqs))
	items := make([]*enqueueItem, 0, len(reqs))
	for i, req := range reqs {
		n := req.Notification
		if req.Attempts < 0 {
			results[i].Err = notify.Errorf("attempts", "must not be negative")
			continue
		}
		if _, ok := channelLetters[n.Channel]; !ok {
			results[i].Err = notify.Errorf("channel", "%q is not a channel", n.Channel)
			continue
		}
		if len(n.Backoff) == 0 {
			results[i].Err = notify.Errorf("backoff", "must hold at least one attempt")
			continue
		}
		// Times from the parking band up are a pause's (ParkAt): a
		// notification sent then would be taken for parked, and made due
		// by the next UnparkStray.
		due := n.SendAt.Add(time.Duration(n.Backoff[0]))
		if err := checkDue(n.SendAt, parkBaseMS-1); err != nil {
			results[i].Err = notify.Errorf("send_at", "%v", err)
			continue
		}
		if err := checkDue(due, parkBaseMS-1); err != nil {
			results[i].Err = notify.Errorf("backoff[0]", "puts the first attempt at a time that %v", err)
			continue
		}
		first := dueMS(due)
		backing = append(backing, enqueueItem{index: i, req: req, due: first, content: encodeContent(n, now, first)})
		items = append(items, &backing[len(backing)-1])
	}
	batches := [][]*enqueueItem{items}
	if replacesRepeat(items) {
		batches = rounds(items)
	}
	for _, round := range batches {
		if err := s.enqueueItems(ctx, round, results, now); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// replacesRepeat reports whether a replace in items names the id of an
// earlier item, which one script call would refuse (see rounds). Other
// repeats need no rounds: the script compares a later item with what the
// earlier one wrote, as an enqueue made after it would be.
func replacesRepeat(items []*enqueueItem) bool {
	if !slices.ContainsFunc(items, func(it *enqueueItem) bool { return it.req.Replace }) {
		return false
	}
	// Few items, as the batcher's usually are, are compared without
	// allocating.
	if len(items) <= 16 {
		for i, it := range items {
			if !it.req.Replace {
				continue
			}
			for _, earlier := range items[:i] {
				if earlier.req.Notification.ID == it.req.Notification.ID {
					return true
				}
			}
		}
		return false
	}
	seen := make(map[string]struct{}, len(items))
	for _, it := range items {
		if _, ok := seen[it.req.Notification.ID]; ok && it.req.Replace {
			return true
		}
		seen[it.req.Notification.ID] = struct{}{}
	}
	return false
}

// rounds splits items into rounds in which each id comes once, the k-th
// item of an id in round k. A script decides every item of its call
// against the records as they were before the call, and refuses to
// replace what an earlier item of the call wrote: written in rounds, each
// item is decided after those before it, as if made one after the other,
// so that a batch that enqueues a reminder and then moves it, or moves
// made at the same time by callers whose enqueues the batcher writes
// together, replace rather than conflict.
func rounds(items []*enqueueItem) [][]*enqueueItem {
	var out [][]*enqueueItem
	seen := make(map[string]int, len(items))
	for _, it := range items {
		k := seen[it.req.Notification.ID]
		seen[it.req.Notification.ID] = k + 1
		if k == len(out) {
			out = append(out, nil)
		}
		out[k] = append(out[k], it)
	}
	return out
}

// enqueueItems writes items, in which no replace repeats an earlier id,
// and fills in their results.
func (s *Store) enqueueItems(ctx context.Context, items []*enqueueItem, results []EnqueueResult, now time.Time) error {
	pending, err := s.placeStubs(ctx, items)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	// A replace that moves a record to another queue or topic needs the old
	// keys; the script says which, and those items run once more with them.
	for try := 0; len(pending) > 0 && try < 2; try++ {
		calls, groups := s.enqueueCalls(pending, now)
		if err := s.runAcked(ctx, calls); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		var again []*enqueueItem
		for c, call := range calls {
			codes, details, err := replyCodes(call, len(groups[c]))
			for j, it := range groups[c] {
				switch {
				case err != nil:
					results[it.index].Err = fmt.Errorf("enqueue: %w", err)
				case codes[j] == codeNeedKeys && try == 0 && len(details[j]) == 2:
					it.oldQueue, it.oldTopic = replyString(details[j][0]), replyString(details[j][1])
					again = append(again, it)
				default:
					it.code = codes[j]
					if len(details[j]) == 1 {
						it.waitingFor = replyString(details[j][0])
					}
				}
			}
		}
		pending = again
	}
	s.keepStubs(ctx, items)
	return s.enqueueResults(ctx, items, results, now)
}

// enqueueItem is one notification on its way into a script.
type enqueueItem struct {
	index   int
	req     EnqueueRequest
	due     int64
	content []byte
	// oldQueue and oldTopic are where a replaced record sits, when the
	// script asked for those keys.
	oldQueue, oldTopic string
	code               int
	// waitingFor is the notification it waits behind in its order key's
	// line, as the script answered; "" when it heads the line.
	waitingFor string
	// existing is set when the id is taken by another notification found
	// while placing the stub: the enqueue is a conflict.
	existing bool
	// stubKept is set when the stub was in place already.
	stubKept bool
}

// enqueueCalls builds one script call per shard for items, and returns the
// items of each call in order. New notifications without an order key, on
// a Redis that holds every shard, go in one call whatever their shards.
func (s *Store) enqueueCalls(items []*enqueueItem, now time.Time) ([]*scriptCall, [][]*enqueueItem) {
	byShard := map[int][]*enqueueItem{}
	for _, it := range items {
		shard := s.keys.shardFor(it.req.Notification)
		byShard[shard] = append(byShard[shard], it)
	}
	if !slices.ContainsFunc(items, (*enqueueItem).special) {
		return s.enqueueNewCalls(byShard, now)
	}
	k := &s.keys
	var calls []*scriptCall
	var groups [][]*enqueueItem
	for _, shard := range sortedKeys(byShard) {
		group := byShard[shard]
		var queues, topics keyIndex
		args := make([]any, 6, 6+13*len(group))
		for _, it := range group {
			n := it.req.Notification
			queue := queueOf(n.Channel, n.Topic)
			q, t := queues.of(queue), topics.of(n.Topic)
			oq, ot := 0, 0
			if it.oldQueue != "" {
				oq, ot = queues.of(it.oldQueue), topics.of(it.oldTopic)
			}
			var dead []byte
			if it.req.Dead != nil {
				a := *it.req.Dead
				a.Error = notify.CutError(a.Error)
				dead = a.AppendJSON(nil)
			}
			args = append(args, n.ID, it.content, it.due, boolArg(it.req.Replace), q, t, n.Topic, queue, oq, ot, it.req.Attempts, dead, n.OrderKey)
		}
		args[0], args[1], args[2], args[3], args[4] = ms(now), k.wake(), shard, len(queues), len(topics)
		args[5] = s.cfg.WakeHorizon.Milliseconds()
		keyList := []string{k.job(shard), k.state(shard), k.hist(shard), k.stats(s.counters(shard)), k.finished(shard), k.deadAll(shard),
			k.order(shard), k.link(shard)}
		for _, q := range queues {
			keyList = append(keyList, k.due(shard, q))
		}
		for _, t := range topics {
			keyList = append(keyList, k.dead(shard, t))
		}
		calls = append(calls, &scriptCall{script: enqueueScript, keys: keyList, args: args})
		groups = append(groups, group)
	}
	return calls, groups
}

// special says whether it needs enqueueScript: a replace, an import, or an
// order key.
func (it *enqueueItem) special() bool {
	r := it.req
	return r.Replace || r.Attempts != 0 || r.Dead != nil || r.Notification.OrderKey != "" || it.oldQueue != ""
}

// enqueueNewCalls builds the enqueueNewScript calls of items, none
// special, by shard: one call for every shard on a single Redis, one per
// shard on a Cluster. It returns the items of each call in the order of its
// results.
func (s *Store) enqueueNewCalls(byShard map[int][]*enqueueItem, now time.Time) ([]*scriptCall, [][]*enqueueItem) {
	// A group is the items of one shard, queue and topic that are due
	// already, or not: they share keys.
	type group struct {
		queue, topic string
		ready        bool
		items        []*enqueueItem
	}
	k := &s.keys
	horizon := ms(now) + s.cfg.WakeHorizon.Milliseconds()
	var calls []*scriptCall
	var order [][]*enqueueItem
	var call *scriptCall
	var items []any
	for _, shard := range sortedKeys(byShard) {
		if call == nil || !s.oneNode {
			if call != nil {
				call.args = append(call.args, items...)
			}
			call = &scriptCall{script: enqueueNewScript, keys: []string{k.stats(s.counters(shard))}, args: []any{k.wake(), 0}}
			items = make([]any, 0, 3*len(byShard[shard]))
			calls, order = append(calls, call), append(order, nil)
		}
		var groups []group
		for _, it := range byShard[shard] {
			n := it.req.Notification
			queue := queueOf(n.Channel, n.Topic)
			// Due within the millisecond: the reservation checks the
			// content's due time, so that rounding up never starts one early.
			ready := it.due <= ms(now)+1
			i := slices.IndexFunc(groups, func(g group) bool { return g.queue == queue && g.topic == n.Topic && g.ready == ready })
			if i < 0 {
				i = len(groups)
				groups = append(groups, group{queue: queue, topic: n.Topic, ready: ready})
			}
			groups[i].items = append(groups[i].items, it)
		}
		job := len(call.keys) + 1
		call.keys = append(call.keys, k.job(shard))
		for _, g := range groups {
			earliest := g.items[0].due
			for _, it := range g.items {
				earliest = min(earliest, it.due)
				if g.ready {
					items = append(items, it.req.Notification.ID, it.content)
				} else {
					items = append(items, it.req.Notification.ID, it.content, it.due)
				}
			}
			wake, due, ready := "", k.due(shard, g.queue), ""
			if g.ready {
				due, ready = k.ready(shard, g.queue), "ready"
			}
			if g.ready || earliest <= horizon {
				wake = strconv.FormatInt(earliest, 10)
			}
			d := slices.Index(call.keys, due) + 1
			if d == 0 {
				call.keys = append(call.keys, due)
				d = len(call.keys)
			}
			call.args = append(call.args, job, d, g.topic, shard, g.queue, len(g.items), wake, ready)
			call.args[1] = call.args[1].(int) + 1
			order[len(order)-1] = append(order[len(order)-1], g.items...)
		}
	}
	call.args = append(call.args, items...)
	return calls, order
}

// enqueueResults fills in the result of each item from its code: a new or
// replaced record is the request as stored; an existing one is read back.
func (s *Store) enqueueResults(ctx context.Context, items []*enqueueItem, results []EnqueueResult, now time.Time) error {
	var existing []*enqueueItem
	for _, it := range items {
		r := &results[it.index]
		if r.Err != nil {
			continue
		}
		if it.existing {
			it.code = codeConflict
		}
		switch it.code {
		case codeOK, codeReplaced:
			r.Status = Created
			if it.code == codeReplaced {
				r.Status = Replaced
			}
			r.Notification = stored(&it.req, now, it.due)
			r.Notification.WaitingFor = it.waitingFor
		case codeExists, codeConflict, codeReserved, codeOrdered:
			existing = append(existing, it)
		case codeNeedKeys:
			r.Err = fmt.Errorf("enqueue %s: the record kept moving during the replace", it.req.Notification.ID)
		default:
			r.Err = fmt.Errorf("enqueue %s: unexpected code %d", it.req.Notification.ID, it.code)
		}
	}
	if len(existing) == 0 {
		return nil
	}
	ids := make([]string, len(existing))
	for i, it := range existing {
		ids[i] = it.req.Notification.ID
	}
	got, err := s.getMany(ctx, ids, true)
	if err != nil {
		return fmt.Errorf("enqueue: read existing: %w", err)
	}
	for i, it := range existing {
		r := &results[it.index]
		r.Notification = got[i]
		switch {
		case got[i] == nil:
			r.Err = fmt.Errorf("enqueue %s: the existing record vanished", ids[i])
		case it.code == codeExists, it.code == codeConflict && sameAsLegacy(got[i], it.req.Notification):
			r.Status = Existing
		case it.code == codeConflict && it.req.Replace && s.keys.shardFor(got[i]) != s.keys.shardFor(it.req.Notification):
			r.Err = otherShard(got[i])
		case it.code == codeConflict:
			r.Err = notify.ErrConflict
		case it.code == codeOrdered:
			r.Err = notify.ErrOrdered
		default:
			r.Err = notify.ErrReserved
		}
	}
	return nil
}

// otherShard answers a replace of n by a notification that lives in another
// shard: as the same replace within one shard does where that refuses it
// too (n reserved, or holding its place in its key's line), else
// notify.ErrOtherShard.
func otherShard(n *notify.Notification) error {
	switch {
	case n.State == notify.StateReserved:
		return notify.ErrReserved
	case n.OrderKey != "" && n.State == notify.StateScheduled:
		return notify.ErrOrdered
	}
	return notify.ErrOtherShard
}

// stored makes req's notification the record it became when stored at now,
// first due at due (ms), what Get would read back, and returns it. It
// completes the notification in place rather than copy it: the caller
// handed it over (EnqueueRequest), and a copy was a sixth of the bytes a
// batch enqueue allocates.
func stored(req *EnqueueRequest, now time.Time, due int64) *notify.Notification {
	out := req.Notification
	out.State, out.Attempts = notify.StateScheduled, req.Attempts
	out.CreatedAt = fromMS(ms(now))
	out.UpdatedAt = out.CreatedAt
	out.SendAt = fromMS(dueMS(out.SendAt))
	out.NextAttemptAt = optMS(due)
	out.History = []notify.Attempt{}
	out.Receipt, out.Deadline = "", nil
	if req.Dead != nil {
		out.State, out.NextAttemptAt = notify.StateDead, nil
		out.History = []notify.Attempt{*req.Dead}
	}
	return out
}

// keyIndex numbers the distinct queues or topics of a script call: the
// script finds item i's key at the index it was given.
type keyIndex []string

// of returns v's 1-based index, adding it when new.
func (x *keyIndex) of(v string) int {
	if i := slices.Index(*x, v); i >= 0 {
		return i + 1
	}
	*x = append(*x, v)
	return len(*x)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// stub is what a notification's id shard holds when the notification lives
// in its order key's shard.
func stub(shard int) string { return "@" + strconv.Itoa(shard) }

// keepStubs writes again the stubs of new records whose enqueue found the
// stub in place: it led to an earlier record of the id, and the sweep or
// purge that deleted that record may have deleted the stub since (see
// dropStubs). Outside that race the stub of a new record is written, not
// kept, so this costs nothing.
func (s *Store) keepStubs(ctx context.Context, items []*enqueueItem) {
	byShard := map[int][]string{}
	for _, it := range items {
		if it.stubKept && it.code == codeOK {
			n := it.req.Notification
			byShard[s.keys.shardFor(n)] = append(byShard[s.keys.shardFor(n)], n.ID)
		}
	}
	for shard, ids := range byShard {
		s.restoreStubs(ctx, shard, ids)
	}
}

// placeStubs writes, for each item with an order key whose id belongs to
// another shard than its key, the stub that leads there, and returns the
// items to store. An item whose id is taken by a notification without an
// order key, or with another order key, is marked existing: a conflict. A
// stub that leads nowhere (its enqueue failed half-way, or its record
// expired) is replaced.
func (s *Store) placeStubs(ctx context.Context, items []*enqueueItem) ([]*enqueueItem, error) {
	var keyed []*enqueueItem
	for _, it := range items {
		if n := it.req.Notification; n.OrderKey != "" && s.keys.shardOf(n.ID) != s.keys.shardFor(n) {
			keyed = append(keyed, it)
		}
	}
	if len(keyed) == 0 {
		return items, nil
	}
	force := map[*enqueueItem]bool{}
	for try := 0; try < 2; try++ {
		byShard := map[int][]*enqueueItem{}
		for _, it := range keyed {
			byShard[s.keys.shardOf(it.req.Notification.ID)] = append(byShard[s.keys.shardOf(it.req.Notification.ID)], it)
		}
		var calls []*scriptCall
		var groups [][]*enqueueItem
		for _, shard := range sortedKeys(byShard) {
			var args []any
			for _, it := range byShard[shard] {
				args = append(args, it.req.Notification.ID, stub(s.keys.shardFor(it.req.Notification)), boolArg(force[it]))
			}
			calls = append(calls, &scriptCall{script: stubScript, keys: []string{s.keys.job(shard)}, args: args})
			groups = append(groups, byShard[shard])
		}
		// Acknowledged like the record: on a Cluster the stub is on
		// another master, and one that lost it in a failover would leave
		// Get and Cancel answering 404 for a notification still delivered.
		if err := s.runAcked(ctx, calls); err != nil {
			return nil, err
		}
		var moved []*enqueueItem
		var other []string
		for c, call := range calls {
			codes, details, err := replyCodes(call, len(groups[c]))
			if err != nil {
				return nil, err
			}
			for j, it := range groups[c] {
				switch codes[j] {
				case codeOK:
					it.stubKept = len(details[j]) > 0
				case codeMoved:
					moved = append(moved, it)
					other = append(other, replyString(details[j][0]))
				default:
					it.existing = true
				}
			}
		}
		if len(moved) == 0 {
			break
		}
		// A stub leading elsewhere is either a live notification of another
		// key (a conflict) or stale: look.
		pipe := s.client.Pipeline()
		found := make([]*redis.BoolCmd, len(moved))
		for i, it := range moved {
			shard, err := strconv.Atoi(strings.TrimPrefix(other[i], "@"))
			if err != nil || shard < 0 || shard >= s.keys.shards {
				shard = 0
			}
			found[i] = pipe.HExists(ctx, s.keys.job(shard), it.req.Notification.ID)
		}
		if _, err := s.exec(ctx, pipe); err != nil {
			return nil, err
		}
		keyed = nil
		for i, it := range moved {
			if found[i].Val() || try > 0 {
				it.existing = true
				continue
			}
			force[it] = true
			keyed = append(keyed, it)
		}
		if len(keyed) == 0 {
			break
		}
	}
	out := make([]*enqueueItem, 0, len(items))
	for _, it := range items {
		if !it.existing {
			out = append(out, it)
		}
	}
	return out, nil
}
