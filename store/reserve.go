package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
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

// MaxReserve bounds the notifications one Reserve call hands out.
const MaxReserve = maxScriptBatch

// Head is the due time of the earliest notification left in a shard's queue
// after a reservation; zero when the queue is empty.
type Head struct {
	Shard int
	Due   time.Time
}

// Reserve reserves up to limit due notifications of queue, earliest first
// within each shard, from shards (those the caller knows to have due work),
// in one pipeline. The limit is shared among the shards; when it is smaller
// than their number, successive calls start at a different shard, so that
// none starves. Each notification comes back reserved with a Receipt and a
// Deadline (now + its ttr); nothing due later than now is ever returned.
// The heads tell the caller when each asked shard has work next: a head
// already due means the shard had more than its share.
//
// A reserved notification whose content cannot be decoded is quarantined
// (see Quarantined) and left out, so that it cannot stop the queue.
//
// What a call whose answer was lost, although Redis may have run it,
// reserved is given back before Reserve returns, whatever ctx (on a
// Cluster, also where other shards' answers came). When that fails too,
// the error is a *ReserveError, whose Lost the caller hands to GiveBack
// once Redis answers again.
func (s *Store) Reserve(ctx context.Context, queue string, shards []int, limit int) ([]*notify.Notification, []Head, error) {
	return s.reserve(ctx, queue, shards, limit, false)
}

// ReserveAhead is Reserve for a caller whose workers take what it reserves
// in turn, some only after others' attempts: each waits reserved ahead for
// a worker, and Ahead reports it so. The caller notes each with Start as
// its attempt starts: should the caller die, the reaper gives back
// uncounted the ones it never started (Expired), and counts the others as
// attempts that ran out.
func (s *Store) ReserveAhead(ctx context.Context, queue string, shards []int, limit int) ([]*notify.Notification, []Head, error) {
	return s.reserve(ctx, queue, shards, limit, true)
}

// reserve is Reserve, numbering what it reserves for Start when ahead.
func (s *Store) reserve(ctx context.Context, queue string, shards []int, limit int, ahead bool) ([]*notify.Notification, []Head, error) {
	if err := s.open(ctx); err != nil {
		return nil, nil, err
	}
	if len(shards) == 0 || limit < 1 {
		return nil, nil, nil
	}
	limit = min(limit, MaxReserve)
	now := ms(s.Now())
	receipt := s.receiptPrefix()
	quotas := splitQuotas(shards, limit, int(s.rotate.Add(1)))
	groups := scriptGroups(s.oneNode, quotas, func(q quota) int { return q.max })
	calls := make([]*scriptCall, len(groups))
	k := &s.keys
	for i, g := range groups {
		keyList := make([]string, 1, 2+5*len(g))
		keyList[0] = k.stats(s.counters(g[0].shard))
		args := make([]any, 1, 2+2*len(g))
		args[0] = now
		most := 0
		for _, q := range g {
			keyList = append(keyList, k.due(q.shard, queue), k.reserved(q.shard), k.job(q.shard), k.state(q.shard), k.ready(q.shard, queue))
			args = append(args, q.max, receipt+strconv.Itoa(q.shard))
			most += q.max
		}
		// ReserveAhead's are numbered on from the queue's last; Reserve's
		// are all left unnumbered.
		unnumbered, seq := most, int64(0)
		if ahead {
			unnumbered = 0
			s.aheadMu.Lock()
			seq = s.aheadNext[queue] + 1
			s.aheadNext[queue] += int64(most)
			s.aheadMu.Unlock()
		}
		args = append(args, unnumbered, seq)
		keyList = append(keyList, k.givenBack(s.counters(g[0].shard), receipt))
		calls[i] = &scriptCall{script: reserveScript, keys: keyList, args: args}
	}
	// lost names the shards of the calls whose answers were lost.
	lost := LostReservation{Queue: queue, Receipt: receipt, At: fromMS(now)}
	run := s.runScripts
	if s.cfg.WaitReplicas > 0 {
		// A reservation the master alone holds is lost with it: the
		// promoted replica finds the notification due and hands it out
		// again while its first attempt runs.
		run = s.runAcked
	}
	if err := run(ctx, calls); err != nil && !errors.Is(err, notify.ErrNotReplicated) {
		if mayHaveRun(err) {
			lost.Shards = slices.Clone(shards)
		}
		return nil, nil, s.unanswered(ctx, lost, fmt.Errorf("reserve %s: %w", queue, err))
	}
	var out, unconfirmed []*notify.Notification
	var unconfirmedShards []int
	heads := make([]Head, 0, len(quotas))
	var firstErr error
	for i, c := range calls {
		if c.unconfirmed != nil {
			// Reported as a failed call, not as ErrNotReplicated: nothing
			// is left reserved for the caller to read back.
			firstErr = cmp.Or(firstErr, fmt.Errorf("not confirmed by replicas, so given back: %v", c.unconfirmed))
			for _, q := range groups[i] {
				unconfirmedShards = append(unconfirmedShards, q.shard)
			}
		}
		v, err := c.cmd.Result()
		if err != nil && mayHaveRun(err) {
			for _, q := range groups[i] {
				lost.Shards = append(lost.Shards, q.shard)
			}
		}
		var replies []any
		if err == nil {
			replies, err = replyList(v, len(groups[i]))
		}
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		for j, q := range groups[i] {
			l, err := replyList(replies[j], 4)
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			h := Head{Shard: q.shard}
			if v, err := strconv.ParseInt(replyString(l[0]), 10, 64); err == nil {
				h.Due = fromMS(v)
			}
			heads = append(heads, h)
			ids, _ := l[1].([]any)
			contents, _ := l[2].([]any)
			lines, _ := l[3].([]any)
			if len(contents) != len(ids) || len(lines) != len(ids) {
				firstErr = cmp.Or(firstErr, fmt.Errorf("reserve: %d ids, %d contents and %d lines", len(ids), len(contents), len(lines)))
				continue
			}
			for x, v := range ids {
				id, content := replyString(v), replyString(contents[x])
				if content == "" {
					continue // gone meanwhile: nothing was reserved
				}
				line := replyString(lines[x])
				n, _, err := decode(id, content, line)
				if err != nil {
					s.quarantine(ctx, q.shard, id, content, line, err)
					continue
				}
				if c.unconfirmed != nil {
					unconfirmed = append(unconfirmed, n)
					continue
				}
				out = append(out, n)
			}
		}
	}
	if len(unconfirmed) > 0 && !s.giveBackNow(ctx, unconfirmed) {
		lost.Shards = append(lost.Shards, unconfirmedShards...)
	}
	// Reserved notifications are returned even when another shard failed:
	// dropping them would strand them until their ttr.
	if firstErr != nil && len(out) == 0 {
		return nil, nil, s.unanswered(ctx, lost, fmt.Errorf("reserve %s: %w", queue, firstErr))
	}
	// The caller gets what came back; what did not goes back now, or, on
	// failure, waits out its ttr: the caller has an answer to work on.
	_ = s.unanswered(ctx, lost, nil)
	return out, heads, nil
}

// giveBackTimeout bounds how long Reserve tries to give back what the calls
// whose answers were lost reserved, whatever the caller's context: one
// that ended (a dispatcher stopping, a consumer hanging up) is why some
// were lost.
const giveBackTimeout = 2 * time.Second

// unanswered gives back at once what lost reserved, if anything, and
// returns err, the failed Reserve's error: as a *ReserveError naming lost
// when that could not be done, for the caller to GiveBack once Redis
// answers again.
func (s *Store) unanswered(ctx context.Context, lost LostReservation, err error) error {
	if len(lost.Shards) == 0 {
		return err
	}
	// Whatever becomes of them, what it reserved is never started.
	s.aheadMu.Lock()
	s.newHolderLocked()
	s.aheadMu.Unlock()
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	_, gerr := s.GiveBack(gctx, lost)
	switch {
	case gerr == nil:
		return err
	case err == nil:
		s.cfg.Logger.WarnContext(ctx, "store: could not give back what a reservation whose answer was lost had reserved; it waits out its ttr",
			"queue", lost.Queue, "error", gerr)
		return nil
	}
	return &ReserveError{Lost: lost, Err: err}
}

// giveBackNow gives back ns, reserved by a call the replicas did not
// confirm, whatever ctx, as unanswered does, and reports whether it did. It
// waits for no replica: the replicas never had the reservations either.
func (s *Store) giveBackNow(ctx context.Context, ns []*notify.Notification) bool {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	_, err := s.finish(gctx, s.releases(ns), s.runScripts)
	return err == nil
}

// ReserveError is a Reserve call that got no answer from Redis, which may
// have reserved notifications for it all the same (a reply lost to a
// timeout or a broken connection, or a context that ended while the call
// was under way), and that could not give them back at once. Left alone,
// they would wait out their ttr and then count an attempt that never was;
// GiveBack gives them back unattempted once Redis answers again.
type ReserveError struct {
	Lost LostReservation
	Err  error
}

func (e *ReserveError) Error() string { return e.Err.Error() }
func (e *ReserveError) Unwrap() error { return e.Err }

// mayHaveRun reports whether a call that failed with err may have run in
// Redis all the same: not when no connection could be had (a refused
// dial, an exhausted pool) or Redis refused it with an error reply (a
// redirect among them).
func mayHaveRun(err error) bool {
	var reply redis.Error
	return !misrouted(err) && !errors.Is(err, redis.ErrPoolTimeout) && !errors.Is(err, redis.ErrClosed) && !errors.As(err, &reply)
}

// LostReservation names a Reserve call whose answer was lost.
type LostReservation struct {
	Queue  string
	Shards []int
	// Receipt is the call's receipt prefix, and At its now: what it
	// reserved holds the receipt, with a deadline at or after At.
	Receipt string
	At      time.Time
}

// heldByPage is how many reservations of a shard heldBy reads at a time,
// and heldByPages how many pages it reads at most.
const (
	heldByPage  = 500
	heldByPages = 20
)

// GiveBack gives back, unattempted and uncounted, what lost reserved and
// still holds, due again at its due time, and returns how many. It reads
// the reservations of lost's shards whose deadlines are at or after
// lost.At, a page at a time, and releases those holding lost's receipt: a
// failure path, which costs a read of the shards' current reservations.
//
// Before it reads, it marks lost's call given back, so that the call, if
// Redis has not run it yet (a request held up on its way, which reaches
// Redis after this read), reserves nothing when it arrives: left to run,
// it would reserve for no one, and its notifications would wait out their
// ttr and count an attempt never made.
func (s *Store) GiveBack(ctx context.Context, lost LostReservation) (int, error) {
	if err := s.open(ctx); err != nil {
		return 0, err
	}
	if err := s.markGivenBack(ctx, lost); err != nil {
		return 0, err
	}
	held, err := s.heldBy(ctx, lost)
	if err != nil || len(held) == 0 {
		return 0, err
	}
	errs, err := s.GiveBackUnstarted(ctx, held)
	if err != nil {
		return 0, err
	}
	given := 0
	for _, e := range errs {
		if e == nil {
			given++
		}
	}
	return given, nil
}

// givenBackFor is how long a lost reservation's call stays marked given
// back: longer than a request can be held up on its way, which TCP's
// retransmissions bound at about 15 minutes (tcp_retries2).
const givenBackFor = 20 * time.Minute

// markGivenBack marks lost's call given back in the slot of each of its
// shards' counters, where the call's script looks (reserveScript).
func (s *Store) markGivenBack(ctx context.Context, lost LostReservation) error {
	var calls []*scriptCall
	marked := map[int]bool{}
	for _, shard := range lost.Shards {
		c := s.counters(shard)
		if marked[c] {
			continue
		}
		marked[c] = true
		calls = append(calls, &scriptCall{script: markScript,
			keys: []string{s.keys.givenBack(c, lost.Receipt)}, args: []any{givenBackFor.Milliseconds()}})
	}
	if err := s.runScripts(ctx, calls); err != nil {
		return fmt.Errorf("mark a lost reserve call given back: %w", err)
	}
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			return fmt.Errorf("mark a lost reserve call given back: %w", err)
		}
	}
	return nil
}

// GiveBackUnstarted gives back reserved notifications whose attempts never
// started: each is due again when it was, keeps its place, counts no
// attempt and adds nothing to its history. Errors are as Finish's.
func (s *Store) GiveBackUnstarted(ctx context.Context, ns []*notify.Notification) ([]error, error) {
	return s.Finish(ctx, s.releases(ns))
}

// releases returns the finishes that give back ns unstarted.
func (s *Store) releases(ns []*notify.Notification) []Finish {
	now := s.Now()
	out := make([]Finish, len(ns))
	for i, n := range ns {
		out[i] = Finish{Notification: n, Action: notify.ActionRelease, NextAt: n.DueAt(now)}
	}
	return out
}

// heldBy returns the notifications lost reserved that are still reserved
// by it, as Reserve would have returned them.
func (s *Store) heldBy(ctx context.Context, lost LostReservation) ([]*notify.Notification, error) {
	var out []*notify.Notification
	for _, shard := range lost.Shards {
		receipt := lost.Receipt + strconv.Itoa(shard)
		for page := range heldByPages {
			ids, err := s.client.ZRangeByScore(ctx, s.keys.reserved(shard), &redis.ZRangeBy{
				Min: strconv.FormatInt(ms(lost.At), 10), Max: "+inf", Offset: int64(page * heldByPage), Count: heldByPage}).Result()
			if err != nil {
				return nil, fmt.Errorf("find the reservations of a lost reserve call: %w", err)
			}
			if len(ids) == 0 {
				break
			}
			pipe := s.client.Pipeline()
			contents, states := pipe.HMGet(ctx, s.keys.job(shard), ids...), pipe.HMGet(ctx, s.keys.state(shard), ids...)
			if _, err := s.exec(ctx, pipe); err != nil {
				return nil, fmt.Errorf("read the reservations of a lost reserve call: %w", err)
			}
			for i, id := range ids {
				content, _ := contents.Val()[i].(string)
				state, _ := states.Val()[i].(string)
				if n, _, err := decode(id, content, state); err == nil && n.State == notify.StateReserved && strings.HasPrefix(n.Receipt, receipt) && (len(n.Receipt) == len(receipt) || n.Receipt[len(receipt):len(receipt)+1] == aheadMark) {
					out = append(out, n)
				}
			}
			if len(ids) < heldByPage {
				break
			}
		}
	}
	return out, nil
}

// quota is one shard's share of a reservation.
type quota struct{ shard, max int }

// splitQuotas shares n reservations among shards; when there are fewer than
// shards, a rotating start keeps any shard from starving.
func splitQuotas(shards []int, n, rotate int) []quota {
	if n < len(shards) {
		out := make([]quota, n)
		for i := range out {
			out[i] = quota{shard: shards[(rotate+i)%len(shards)], max: 1}
		}
		return out
	}
	out := make([]quota, len(shards))
	for i, s := range shards {
		q := n / len(shards)
		if i < n%len(shards) {
			q++
		}
		out[i] = quota{shard: s, max: q}
	}
	return out
}

// scriptGroups cuts per-shard parts of a batch into script calls: each
// part alone on a Cluster, where a script touches one slot; on a single
// Redis as many parts together as maxScriptBatch items allow, so that a
// batch costs one script, not one per shard.
func scriptGroups[T any](oneNode bool, parts []T, size func(T) int) [][]T {
	var out [][]T
	n := 0
	for _, p := range parts {
		if len(out) == 0 || !oneNode || n+size(p) > maxScriptBatch {
			out, n = append(out, nil), 0
		}
		out[len(out)-1] = append(out[len(out)-1], p)
		n += size(p)
	}
	return out
}

// receiptPrefix is unique to one Reserve call; with the shard appended it
// is the receipt of every notification the call reserves in that shard,
// each named by its id. Its 32 characters also make every reserved state
// line longer than Redis keeps in a listpack (hash-max-listpack-value, 64
// by default), so that a shard's state hash becomes a hash table at its
// first reservation: a listpack is searched from its start for every
// field, which a busy shard's hundreds of lines would make slow.
func (s *Store) receiptPrefix() string {
	var b [(receiptLen - holderLen) / 2]byte
	_, _ = rand.Read(b[:])
	s.aheadMu.Lock()
	defer s.aheadMu.Unlock()
	return s.holder + hex.EncodeToString(b[:]) + "."
}

// newHolderLocked gives the Store a holder of its own, for the receipts
// of its reservations from now on: one whose answer was lost, which may
// have reserved notifications no worker will have, was numbered below the
// starts to come, which would have counted them. aheadMu is held.
func (s *Store) newHolderLocked() {
	s.holder = newHolder()
	s.holders[s.holder] = true
}

// startRecord names one record of starts: the holder's, of one queue.
type startRecord struct{ holder, queue string }

// receiptLen is the length of a receipt's prefix before its dot, of which
// the first holderLen name the Store that reserved it (Store.holder).
const (
	receiptLen = 32
	holderLen  = 16
)

// newHolder returns a Store's holder, the start of its receipts.
func newHolder() string {
	var b [holderLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// aheadMark follows the receipt of a notification reserved ahead of the
// workers (ReserveAhead), before its number among its queue's.
const aheadMark = "+"

// Ahead reports whether n was reserved ahead of the workers: its start
// is to be noted with Start.
func Ahead(n *notify.Notification) bool { return strings.Contains(n.Receipt, aheadMark) }

// aheadOf returns, for a receipt of a notification reserved ahead, the
// holder of the Store that reserved it and its number among its queue's.
func aheadOf(receipt string) (holder string, seq int64, ok bool) {
	i := strings.LastIndex(receipt, aheadMark)
	if i < holderLen {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(receipt[i+1:], 10, 64)
	return receipt[:holderLen], seq, err == nil
}

// startedFor is how long a Store's record of its starts (Start) outlives
// its last start: far longer than any reservation waits to be reaped.
const startedFor = 7 * 24 * time.Hour

// startsEvery is how often a Store writes its record of starts at most
// (Start): a dispatcher killed within about this long after it started an
// attempt reserved ahead may have that attempt given back uncounted, and
// made again.
const startsEvery = 10 * time.Millisecond

// Start notes that the attempt of n, reserved ahead of the workers
// (Ahead), starts now, for the reaper: should the caller die, an attempt
// it started counts, as one that ran out, and one it reserved ahead and
// never started goes back uncounted. The note is one number per queue
// (and holder, newHolderLocked): the Store numbers what it reserves ahead
// in the order the caller hands it to its workers, who start it in that
// order, and Start raises the number to n's. It is written to Redis in
// the background, at most every startsEvery and never on the attempt's
// way: see Started. A write that fails is made again at the next Start or
// reap (Expired) of this Store. A notification not reserved ahead
// (Reserve) needs none.
//
// Several dispatchers sharing one Store share its numbers: a start of one
// may then count a notification waiting for another's worker, should the
// process die.
func (s *Store) Start(n *notify.Notification) {
	if !Ahead(n) {
		return
	}
	_, seq, ok := aheadOf(n.Receipt)
	if !ok {
		return
	}
	r := startRecord{n.Receipt[:holderLen], queueOf(n.Channel, n.Topic)}
	s.aheadMu.Lock()
	defer s.aheadMu.Unlock()
	s.aheadWant[r] = max(s.aheadWant[r], seq)
	s.writeStartsLocked()
}

// Started waits until the starts noted before it was called are written
// (Start), or ctx ends, and returns why a write failed if one did. Starts
// noted meanwhile do not hold it.
func (s *Store) Started(ctx context.Context) error {
	s.aheadMu.Lock()
	goal := s.unwrittenLocked()
	s.writeStartsLocked()
	for {
		done := true
		for q, seq := range goal {
			done = done && s.aheadStarted[q] >= seq
		}
		if done || !s.startsRunning {
			err := s.startsErr
			s.aheadMu.Unlock()
			if done {
				return nil
			}
			return err
		}
		wrote := s.startsWrote
		s.aheadMu.Unlock()
		select {
		case <-wrote:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.aheadMu.Lock()
	}
}

// writeStartsLocked starts the writer of starts (writeStarts) unless it
// runs or has nothing to write. aheadMu is held.
func (s *Store) writeStartsLocked() {
	if s.startsRunning || len(s.unwrittenLocked()) == 0 {
		return
	}
	s.startsRunning = true
	go s.writeStarts()
}

// unwrittenLocked returns, per record, the highest start noted and not
// yet written. aheadMu is held.
func (s *Store) unwrittenLocked() map[startRecord]int64 {
	out := map[startRecord]int64{}
	for r, want := range s.aheadWant {
		if want > s.aheadStarted[r] {
			out[r] = want
		}
	}
	return out
}

// writeStarts writes the starts noted (Start), every queue's in one round
// trip, at most every startsEvery, until none is left unwritten or a write
// fails. One that fails is left for the next Start or reap: a writer that
// kept trying would outlive a Redis gone for good. After each write it
// wakes those waiting in Started.
//
// With Config.WaitReplicas it waits for the replicas, so that a failover
// keeps the record; one they did not confirm within redis.wait_timeout
// stands as written on the master, as an unconfirmed outcome does, and a
// failover then may give its attempts back uncounted.
func (s *Store) writeStarts() {
	for {
		s.aheadMu.Lock()
		top := s.unwrittenLocked()
		if len(top) == 0 {
			s.startsRunning = false
			s.aheadMu.Unlock()
			return
		}
		wait := time.Until(s.startsAt.Add(startsEvery))
		s.aheadMu.Unlock()
		time.Sleep(wait)
		records := slices.Collect(maps.Keys(top))
		calls := make([]*scriptCall, len(records))
		for i, r := range records {
			calls[i] = &scriptCall{script: markScript,
				keys: []string{s.keys.started(r.holder, r.queue)}, args: []any{startedFor.Milliseconds(), top[r]}}
		}
		err := s.runAcked(context.Background(), calls)
		if errors.Is(err, notify.ErrNotReplicated) {
			err = nil
		}
		s.aheadMu.Lock()
		s.startsAt = time.Now()
		for i, c := range calls {
			if err == nil {
				err = c.cmd.Err()
			}
			if c.cmd.Err() == nil {
				s.aheadStarted[records[i]] = max(s.aheadStarted[records[i]], top[records[i]])
			}
		}
		s.startsErr = nil
		if err != nil {
			s.startsErr = fmt.Errorf("record the starts of notifications reserved ahead: %w", err)
			s.startsRunning = false
		}
		close(s.startsWrote)
		s.startsWrote = make(chan struct{})
		running := s.startsRunning
		s.aheadMu.Unlock()
		if !running {
			return
		}
	}
}

// unstarted sorts expired reservations into those reserved ahead that never
// started, by their holders' records of starts (Start), and the others.
// One whose record cannot be read counts as started, as do this Store's
// own when ownPending says some of its starts could not be written: a
// reaper that gives back an attempt made has it made again.
func (s *Store) unstarted(ctx context.Context, expired []*notify.Notification, ownPending bool) (unstarted, others []*notify.Notification) {
	pipe := s.client.Pipeline()
	records := map[string]*redis.StringCmd{}
	for _, n := range expired {
		if holder, _, ok := aheadOf(n.Receipt); ok {
			k := s.keys.started(holder, queueOf(n.Channel, n.Topic))
			if records[k] == nil {
				records[k] = pipe.Get(ctx, k)
			}
		}
	}
	if len(records) == 0 {
		return nil, expired
	}
	_, _ = s.exec(ctx, pipe)
	s.aheadMu.Lock()
	own := maps.Clone(s.holders)
	s.aheadMu.Unlock()
	for _, n := range expired {
		holder, seq, ok := aheadOf(n.Receipt)
		if !ok || (ownPending && own[holder]) {
			others = append(others, n)
			continue
		}
		// None recorded (redis.Nil): none of the holder's started.
		top, err := records[s.keys.started(holder, queueOf(n.Channel, n.Topic))].Int64()
		if seq > top && (err == nil || errors.Is(err, redis.Nil)) {
			unstarted = append(unstarted, n)
		} else {
			others = append(others, n)
		}
	}
	return unstarted, others
}

// Heads returns, for every shard that answers, when the earliest
// notification of queue is due (Due zero when the shard's queue is empty),
// in one pipeline; an error only when none answers. Pull
// consumers, which keep no state between requests, use it to reserve only
// from shards with due work and to sleep until the next due time.
func (s *Store) Heads(ctx context.Context, queue string) ([]Head, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.ZSliceCmd, s.keys.shards)
	ready := make([]*redis.IntCmd, s.keys.shards)
	for shard := range cmds {
		cmds[shard] = pipe.ZRangeWithScores(ctx, s.keys.due(shard, queue), 0, 0)
		ready[shard] = pipe.LLen(ctx, s.keys.ready(shard, queue))
	}
	_, err := s.exec(ctx, pipe)
	now := fromMS(ms(s.Now()))
	heads := make([]Head, 0, len(cmds))
	for shard, c := range cmds {
		// A shard that did not answer (its Cluster master down) is left
		// out, as Reserve leaves it: the others' due work is served
		// meanwhile.
		if failed := cmp.Or(c.Err(), ready[shard].Err()); failed != nil {
			err = cmp.Or(err, failed)
			continue
		}
		h := Head{Shard: shard}
		if zs := c.Val(); len(zs) > 0 {
			h.Due = fromMS(int64(zs[0].Score))
		}
		// A ready list's entries were due when enqueued.
		if ready[shard].Val() > 0 && (h.Due.IsZero() || h.Due.After(now)) {
			h.Due = now
		}
		heads = append(heads, h)
	}
	if len(heads) == 0 && err != nil {
		return nil, fmt.Errorf("read heads of %s: %w", queue, err)
	}
	return heads, nil
}

// Finish ends one reserved attempt.
type Finish struct {
	// Notification is the reserved notification as Reserve, Expired or
	// GetState returned it: its ID, Receipt, Topic, NextAttemptAt (the due
	// time of this attempt) and Version are used. GetState's answer for a
	// notification cancelled while the attempt ran will do as well: it
	// still holds the receipt, and the attempt is recorded (ActionCancelled).
	Notification *notify.Notification
	Action       notify.Action
	// NextAt is when the next attempt is due, for notify.ActionRetry and
	// notify.ActionRelease; it is rounded up to the millisecond.
	NextAt time.Time
	// Attempt is appended to the history. An attempt with no Outcome is
	// not recorded: a release of a notification whose attempt never
	// started (a dispatcher giving back what it reserved ahead).
	Attempt notify.Attempt
}

// Finish ends a batch of attempts in one pipeline: one script on a single
// Redis, one per shard on a Cluster.
// The result holds one error per item: nil; notify.ErrCancelledMeanwhile
// when the notification was cancelled while the attempt ran, which is then
// recorded in its history as it ended (the notification stays cancelled);
// or notify.ErrStaleReceipt when the receipt no longer holds the
// reservation (it expired and was taken over). The returned error is for a
// failure to reach Redis; the caller may retry the whole batch, as a finish
// that already applied answers ErrStaleReceipt the second time. With
// Config.WaitReplicas, notify.ErrNotReplicated comes with the per-item
// results: the finishes applied on the master, unconfirmed by replicas.
func (s *Store) Finish(ctx context.Context, items []Finish) ([]error, error) {
	return s.finish(ctx, items, s.runAcked)
}

// finish is Finish, its scripts run by run: runAcked, or runScripts where
// no replica is to be waited for.
func (s *Store) finish(ctx context.Context, items []Finish, run func(context.Context, []*scriptCall) error) ([]error, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	errs := make([]error, len(items))
	now := s.Now()
	prepared := make([]finishItem, len(items))
	byShard := map[int][]int{}
	for i := range items {
		if err := prepared[i].prepare(&items[i], now); err != nil {
			errs[i] = err
			continue
		}
		shard := s.keys.shardFor(items[i].Notification)
		byShard[shard] = append(byShard[shard], i)
	}
	minute := now.Unix() / 60
	batches := s.shardBatches(byShard)
	calls := make([]*scriptCall, len(batches))
	order := make([][]int, len(batches))
	for c, b := range batches {
		calls[c] = s.finishCall(b, prepared, now, minute)
		for _, g := range b {
			order[c] = append(order[c], g.idx...)
		}
	}
	if len(calls) == 0 {
		return errs, nil
	}
	// Writes a WAIT found not replicated did apply on the master: their
	// codes are read, and the call reports notify.ErrNotReplicated.
	var failed error
	if err := run(ctx, calls); err != nil {
		if !errors.Is(err, notify.ErrNotReplicated) {
			return nil, fmt.Errorf("finish: %w", err)
		}
		failed = err
	}
	for c, call := range calls {
		codes, _, err := replyCodes(call, len(order[c]))
		acted := false
		for j, i := range order[c] {
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("finish: %w", err)
				failed = errs[i]
			case codes[j] == codeOK && prepared[i].action == notify.ActionCancelled:
				errs[i] = notify.ErrCancelledMeanwhile
				acted = acted || prepared[i].outcome != ""
			case codes[j] == codeOK:
				acted = acted || items[i].Action != notify.ActionRelease
			case codes[j] == codeStale:
				errs[i] = notify.ErrStaleReceipt
			default:
				errs[i] = fmt.Errorf("finish: unexpected code %d", codes[j])
			}
		}
		// Only an expiry Redis confirmed setting (and replicated, where
		// asked) lets the minute's later finishes leave it.
		if keep, _ := call.args[6].(int); keep > 0 && acted && err == nil && failed == nil {
			s.setActivityExpiry(s.counters(batches[c][0].shard), minute)
		}
	}
	if failed == nil {
		s.finishCancelled(ctx, items, prepared, errs)
	}
	// A shard that could not be reached fails the whole call so the caller
	// retries; items that did apply answer ErrStaleReceipt next time.
	return errs, failed
}

// finishCancelled records the attempts that a batch found stale because
// their notifications were cancelled while they ran, as the attempts
// ended, and sets their errors to notify.ErrCancelledMeanwhile: a reminder
// that went out after all shows in its history. It reads the stale items'
// records, a round trip that only a stale finish costs; where that read
// fails, they stay stale and unrecorded, as a reaped attempt's outcome is.
func (s *Store) finishCancelled(ctx context.Context, items []Finish, prepared []finishItem, errs []error) {
	var stale []int
	for i, e := range errs {
		if e == notify.ErrStaleReceipt && prepared[i].action != notify.ActionCancelled && items[i].Attempt.Outcome != "" {
			stale = append(stale, i)
		}
	}
	if len(stale) == 0 {
		return
	}
	ids := make([]string, len(stale))
	for j, i := range stale {
		ids[j] = items[i].Notification.ID
	}
	got, err := s.getMany(ctx, ids, false)
	if err != nil {
		return
	}
	var again []Finish
	var at []int
	for j, i := range stale {
		if n := got[j]; n != nil && n.State == notify.StateCancelled && n.Receipt == items[i].Notification.Receipt {
			f := items[i]
			f.Notification = n
			again = append(again, f)
			at = append(at, i)
		}
	}
	if len(again) == 0 {
		return
	}
	res, err := s.Finish(ctx, again)
	if err != nil {
		return
	}
	for j, i := range at {
		errs[i] = res[j]
	}
}

// finishItem is one Finish on its way into a script: the state line it
// replaces and the one it writes, both whole, so that the script parses
// neither.
type finishItem struct {
	f *Finish
	// action is what the script does: f's, or notify.ActionCancelled for
	// a notification cancelled while its attempt ran.
	action notify.Action
	// outcome is what the attempt counts as in the activity hash: "ok",
	// "fail", or "" for none.
	outcome string
	line    string
	// histField and entry are the history entry to write, if any.
	histField string
	entry     []byte
	// next is the next due time (ms) of a retry or release.
	next int64
	// bucket is the lateness bucket the attempt counts in, -1 for none.
	bucket int
}

// prepare checks f and works out what finishing it writes, as of now. A
// notification that this copy does not show reserved under its receipt
// cannot be finished: notify.ErrStaleReceipt.
func (it *finishItem) prepare(f *Finish, now time.Time) error {
	n := f.Notification
	it.f, it.bucket = f, -1
	switch f.Action {
	case notify.ActionAck, notify.ActionDead:
	case notify.ActionRetry, notify.ActionRelease:
		if err := checkDue(f.NextAt, maxScoreMS); err != nil {
			return fmt.Errorf("finish %s: next attempt %w", n.ID, err)
		}
		it.next = dueMS(f.NextAt)
	default:
		return fmt.Errorf("finish %s: unknown action %q", n.ID, f.Action)
	}
	st, err := parseState(n.Version)
	if err != nil || st.receipt == "" || st.receipt != n.Receipt {
		return notify.ErrStaleReceipt
	}
	it.action = f.Action
	switch st.state {
	case notify.StateReserved:
	case notify.StateCancelled:
		// Cancelled while this reservation held it: the attempt went on,
		// and is recorded if it started.
		if f.Attempt.Outcome == "" {
			return notify.ErrStaleReceipt
		}
		it.action = notify.ActionCancelled
	default:
		return notify.ErrStaleReceipt
	}
	if f.Attempt.Outcome != "" {
		att := f.Attempt
		att.Error = notify.CutError(att.Error)
		it.entry = att.AppendJSON(make([]byte, 0, 160+len(att.Error)))
		it.histField = histField(n.ID, st.histLen)
		st.histLen++
		if n.NextAttemptAt != nil && f.Action != notify.ActionRelease && f.Attempt.Outcome != notify.OutcomeTTRExpired {
			it.bucket = latencyBucket(f.Attempt.StartedAt.Sub(*n.NextAttemptAt))
		}
	}
	if f.Action != notify.ActionRelease {
		st.attempts++
	}
	switch {
	case f.Action == notify.ActionRelease:
	case f.Action == notify.ActionAck:
		it.outcome = "ok"
	default:
		it.outcome = "fail"
	}
	st.receipt, st.deadline = "", -1
	if it.action == notify.ActionCancelled {
		// Still cancelled as of the cancel, which the sweep of its
		// finished entry looks for.
		it.line = st.format()
		return nil
	}
	st.next, st.updated = -1, ms(now)
	switch f.Action {
	case notify.ActionAck:
		st.state = notify.StateSucceeded
	case notify.ActionDead:
		st.state = notify.StateDead
	default:
		st.state, st.next = notify.StateScheduled, it.next
	}
	it.line = st.format()
	return nil
}

// counterGroup names an item's action and what it adds to the counters:
// items of one topic, endpoint, action, outcome and lateness bucket add
// alike.
type counterGroup struct {
	topic, endpoint string
	action          notify.Action
	outcome         string
	bucket          int
}

// fields returns the stats and act fields a finished item of g changes,
// each with its change. An attempt to an endpoint counts in the act hash
// for its endpoint as well as for its topic.
func (g counterGroup) fields() (stats, act []any) {
	t := g.topic
	switch g.action {
	case notify.ActionAck:
		stats = []any{t + ":reserved", -1, t + ":succeeded_total", 1}
	case notify.ActionRetry:
		stats = []any{t + ":reserved", -1, t + ":scheduled", 1, t + ":failed_attempts_total", 1}
	case notify.ActionDead:
		stats = []any{t + ":reserved", -1, t + ":failed_attempts_total", 1, t + ":dead", 1}
	case notify.ActionRelease:
		// Given back before it started: no attempt.
		return []any{t + ":reserved", -1, t + ":scheduled", 1}, nil
	case notify.ActionCancelled:
		// The cancel counted the notification out of the reserved ones:
		// only a failed attempt counts, as an attempt.
		switch g.outcome {
		case "":
			return nil, nil
		case "fail":
			stats = []any{t + ":failed_attempts_total", 1}
		}
	}
	whos := []string{t}
	if g.endpoint != "" {
		whos = append(whos, endpointActivity+g.endpoint)
	}
	for _, who := range whos {
		act = append(act, who+"|"+g.outcome, 1)
		if g.bucket >= 0 {
			act = append(act, who+"|lat|"+strconv.Itoa(g.bucket), 1)
		}
	}
	return stats, act
}

// shardItems are the indexes of the items of one shard in a call.
type shardItems struct {
	shard int
	idx   []int
}

// shardBatches cuts items, their indexes by shard, into the script calls
// of one batch: at most maxScriptBatch of a shard in a part, and the parts
// grouped as scriptGroups does.
func (s *Store) shardBatches(byShard map[int][]int) [][]shardItems {
	var shards []shardItems
	for _, shard := range sortedKeys(byShard) {
		for chunk := range slices.Chunk(byShard[shard], maxScriptBatch) {
			shards = append(shards, shardItems{shard: shard, idx: chunk})
		}
	}
	return scriptGroups(s.oneNode, shards, func(g shardItems) int { return len(g.idx) })
}

// finishCall builds the script call that finishes the items of groups.
func (s *Store) finishCall(groups []shardItems, items []finishItem, now time.Time, minute int64) *scriptCall {
	k := &s.keys
	counter := s.counters(groups[0].shard)
	var dues, deads keyIndex
	counters := map[counterGroup]int{}
	var counterArgs, keyedArgs []any
	total := 0
	keyList := []string{k.stats(counter), k.activity(counter, minute)}
	head := make([]any, 9, 9+2*len(groups))
	for _, g := range groups {
		keyList = append(keyList, k.state(g.shard), k.reserved(g.shard), k.hist(g.shard), k.finished(g.shard),
			k.deadAll(g.shard), k.order(g.shard), k.link(g.shard))
		head = append(head, g.shard, len(g.idx))
		total += len(g.idx)
	}
	args := make([]any, 0, 8*total)
	number := 0
	for _, g := range groups {
		for _, i := range g.idx {
			it := &items[i]
			n := it.f.Notification
			number++
			key, next := 0, ""
			switch it.action {
			case notify.ActionRetry, notify.ActionRelease:
				key = dues.of(k.due(g.shard, queueOf(n.Channel, n.Topic)))
				next = strconv.FormatInt(it.next, 10)
			case notify.ActionDead:
				key = deads.of(k.dead(g.shard, n.Topic))
			}
			cg := counterGroup{topic: n.Topic, endpoint: n.Endpoint, action: it.action, outcome: it.outcome, bucket: it.bucket}
			c, ok := counters[cg]
			if !ok {
				c = len(counters) + 1
				counters[cg] = c
				stats, act := cg.fields()
				counterArgs = append(counterArgs, string(cg.action), len(stats)/2)
				counterArgs = append(counterArgs, stats...)
				counterArgs = append(counterArgs, len(act)/2)
				counterArgs = append(counterArgs, act...)
			}
			if n.OrderKey != "" {
				keyedArgs = append(keyedArgs, number, n.Topic, n.OrderKey,
					dues.of(k.due(g.shard, QueuePush)), dues.of(k.due(g.shard, PullQueue(n.Topic))))
			}
			args = append(args, n.ID, n.Version, it.line, it.histField, it.entry, c)
			switch {
			case next != "":
				args = append(args, next, key)
			case key > 0:
				args = append(args, key)
			}
		}
	}
	expires := ""
	if r := s.retentionMS(); r > 0 {
		expires = strconv.FormatInt(ms(now)+r, 10)
	}
	head[0], head[1], head[2], head[3] = ms(now), expires, k.wake(), len(groups)
	head[4], head[5], head[6] = len(dues), len(deads), s.activityExpiry(counter, minute)
	head[7], head[8] = len(counters), len(keyedArgs)/5
	head = append(append(append(head, counterArgs...), keyedArgs...), args...)
	keyList = append(keyList, dues...)
	keyList = append(keyList, deads...)
	return &scriptCall{script: finishScript, keys: keyList, args: head}
}

// activityExpiry returns the expiry to give shard's activity hash of
// minute: its retention until a finish of this store has set it
// (setActivityExpiry), 0 (leave it) after that, which saves an EXPIRE per
// finish. Every call made before then carries the expiry, so that one
// counting an attempt beside a call that counts none (releases only, or
// only stale items) sets it too.
func (s *Store) activityExpiry(shard int, minute int64) int {
	s.actMu.Lock()
	defer s.actMu.Unlock()
	if s.actMinute[shard] == minute {
		return 0
	}
	return int(ActivityRetention / time.Second)
}

// setActivityExpiry records that a finish of shard in minute counted an
// attempt and set its activity hash's expiry, confirmed by Redis: the
// later finishes of the minute leave it.
func (s *Store) setActivityExpiry(shard int, minute int64) {
	s.actMu.Lock()
	defer s.actMu.Unlock()
	if s.actMinute == nil {
		s.actMinute = map[int]int64{}
	}
	s.actMinute[shard] = max(s.actMinute[shard], minute)
}
