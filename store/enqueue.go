package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
	// Digest set.
	Notification *notify.Notification
	// Replace reschedules an existing notification of the same id and other
	// content, unless it is reserved.
	Replace bool
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

// Enqueue stores one notification; see EnqueueBatch.
func (s *Store) Enqueue(ctx context.Context, n *notify.Notification, replace bool) (*notify.Notification, EnqueueStatus, error) {
	res, err := s.EnqueueBatch(ctx, []EnqueueRequest{{Notification: n, Replace: replace}})
	if err != nil {
		return nil, 0, err
	}
	return res[0].Notification, res[0].Status, res[0].Err
}

// EnqueueBatch stores up to MaxBatch notifications in one pipeline: one round
// trip per Redis node however many there are. Each notification's first
// attempt is due at SendAt + Backoff[0]. An id that exists with the same
// content returns the stored record (Existing); with other content it is
// notify.ErrConflict unless Replace is set. The returned error is for a
// failure of the whole batch; per-item outcomes are in the results.
func (s *Store) EnqueueBatch(ctx context.Context, reqs []EnqueueRequest) ([]EnqueueResult, error) {
	if len(reqs) > MaxBatch {
		return nil, fmt.Errorf("enqueue: %d notifications, more than %d", len(reqs), MaxBatch)
	}
	now := s.Now().UTC().Truncate(time.Millisecond)
	results := make([]EnqueueResult, len(reqs))
	calls := make([]*scriptCall, len(reqs))
	records := make([]*record, len(reqs))
	for i, req := range reqs {
		n := req.Notification
		rec := toRecord(n)
		rec.State = notify.StateScheduled
		rec.Attempts = 0
		rec.Created, rec.Updated = ms(now), ms(now)
		rec.NextAt = rec.SendAt + rec.Backoff[0]
		records[i] = rec
		calls[i] = s.enqueueCall(rec, n.Payload, req.Replace, "")
	}
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	// A replace that moves a record to another queue or topic needs the old
	// keys; the script says so, and those items run once more with them.
	for try := 0; len(pending) > 0; try++ {
		batch := make([]*scriptCall, len(pending))
		for j, i := range pending {
			batch[j] = calls[i]
		}
		if err := s.runScripts(ctx, batch); err != nil {
			return nil, fmt.Errorf("enqueue: %w", err)
		}
		var again []int
		for _, i := range pending {
			var oldRec string
			results[i], oldRec = s.enqueueResult(calls[i], reqs[i].Notification.Payload)
			if oldRec != "" && try == 0 {
				calls[i] = s.enqueueCall(records[i], reqs[i].Notification.Payload, true, oldRec)
				again = append(again, i)
			}
		}
		pending = again
	}
	return results, nil
}

// enqueueCall builds the script call for rec; oldRec, when set, is the
// existing record whose queue and dead keys must be passed as well.
func (s *Store) enqueueCall(rec *record, payload json.RawMessage, replace bool, oldRec string) *scriptCall {
	recJSON, _ := json.Marshal(rec)
	shard := s.keys.shardOf(rec.ID)
	k := s.keys
	keys := []string{
		k.meta(shard), k.payload(shard), k.hist(shard), k.due(shard, rec.Queue),
		k.dead(shard, rec.Topic), k.finished(shard), k.stats(shard), k.topics(shard),
	}
	if oldRec != "" {
		var old record
		if err := json.Unmarshal([]byte(oldRec), &old); err == nil {
			keys = append(keys, k.due(shard, old.Queue), k.dead(shard, old.Topic))
		}
	}
	flag := "0"
	if replace {
		flag = "1"
	}
	return &scriptCall{script: enqueueScript, keys: keys, args: []any{rec.ID, string(recJSON), string(payload), flag, k.wake(), shard}}
}

// enqueueResult reads a call's reply; needKeys is the old record when the
// script asked for its keys.
func (s *Store) enqueueResult(c *scriptCall, payload json.RawMessage) (res EnqueueResult, needKeys string) {
	v, err := c.cmd.Result()
	if err != nil {
		return EnqueueResult{Err: fmt.Errorf("enqueue: %w", err)}, ""
	}
	l, err := replyList(v, 3)
	if err != nil {
		return EnqueueResult{Err: err}, ""
	}
	code, _ := replyInt(l[0])
	if code == codeNeedKeys {
		return EnqueueResult{Err: fmt.Errorf("enqueue: record moved during replace")}, replyString(l[1])
	}
	stored := replyString(l[2])
	if code == codeOK || code == codeReplaced {
		stored = string(payload)
	}
	n, err := decodeNotification(replyString(l[1]), stored, "")
	if err != nil {
		return EnqueueResult{Err: err}, ""
	}
	switch code {
	case codeOK:
		return EnqueueResult{Status: Created, Notification: n}, ""
	case codeReplaced:
		return EnqueueResult{Status: Replaced, Notification: n}, ""
	case codeExists:
		return EnqueueResult{Status: Existing, Notification: n}, ""
	case codeConflict:
		return EnqueueResult{Notification: n, Err: notify.ErrConflict}, ""
	case codeReserved:
		return EnqueueResult{Notification: n, Err: notify.ErrReserved}, ""
	}
	return EnqueueResult{Err: fmt.Errorf("enqueue: unexpected code %d", code)}, ""
}
