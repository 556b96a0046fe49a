package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// Get returns a notification with its payload and history.
func (s *Store) Get(ctx context.Context, id string) (*notify.Notification, error) {
	return s.get(ctx, id, true)
}

// GetState returns a notification with its payload but without its
// history, in one round trip: what a consumer finishing its attempt needs.
func (s *Store) GetState(ctx context.Context, id string) (*notify.Notification, error) {
	return s.get(ctx, id, false)
}

func (s *Store) get(ctx context.Context, id string, history bool) (*notify.Notification, error) {
	got, err := s.getMany(ctx, []string{id}, history)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	if got[0] == nil {
		return nil, notify.ErrNotFound
	}
	return got[0], nil
}

// getMany reads notifications with payload, and with history when asked,
// in two round trips however many there are: contents and states, then
// histories and the due times of those that have no state yet (a second
// trip only when needed). A missing id gives nil.
func (s *Store) getMany(ctx context.Context, ids []string, history bool) ([]*notify.Notification, error) {
	pipe := s.client.Pipeline()
	contents := make([]*redis.StringCmd, len(ids))
	states := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		shard := s.keys.shardOf(id)
		contents[i] = pipe.HGet(ctx, s.keys.job(shard), id)
		states[i] = pipe.HGet(ctx, s.keys.state(shard), id)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]*notify.Notification, len(ids))
	hists := make([]*redis.SliceCmd, len(ids))
	dues := make([]*redis.FloatCmd, len(ids))
	pipe = s.client.Pipeline()
	for i, id := range ids {
		if contents[i].Err() != nil {
			continue
		}
		n, histLen, err := decode(id, contents[i].Val(), states[i].Val(), -1)
		if err != nil {
			return nil, err
		}
		out[i] = n
		shard := s.keys.shardOf(id)
		if history && histLen > 0 {
			fields := make([]string, histLen)
			for j := range fields {
				fields[j] = histField(id, j)
			}
			hists[i] = pipe.HMGet(ctx, s.keys.hist(shard), fields...)
		}
		if states[i].Val() == "" {
			dues[i] = pipe.ZScore(ctx, s.keys.due(shard, queueOf(n.Channel, n.Topic)), id)
		}
	}
	if pipe.Len() == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, n := range out {
		if hists[i] != nil {
			if err := decodeHistory(n, hists[i].Val()); err != nil {
				return nil, err
			}
		}
		if dues[i] != nil && dues[i].Err() == nil {
			n.NextAttemptAt = optMS(int64(dues[i].Val()))
		}
	}
	return out, nil
}

func decodeHistory(n *notify.Notification, entries []any) error {
	n.History = make([]notify.Attempt, 0, len(entries))
	for _, e := range entries {
		raw, ok := e.(string)
		if !ok {
			continue // swept or never written: the history has a gap
		}
		var a notify.Attempt
		if err := json.Unmarshal([]byte(raw), &a); err != nil {
			return fmt.Errorf("decode history of %s: %w", n.ID, err)
		}
		n.History = append(n.History, a)
	}
	return nil
}

// Cancel cancels a scheduled or reserved notification and returns its
// record. A reserved one's running attempt can no longer finish it: its ack
// gets notify.ErrStaleReceipt. Cancelling a cancelled notification returns
// it unchanged; a succeeded or dead one is notify.ErrFinished.
func (s *Store) Cancel(ctx context.Context, id string) (*notify.Notification, error) {
	shard := s.keys.shardOf(id)
	queue := QueuePush
	k := s.keys
	for range 3 { // the script names the record's queue when it is another
		v, err := s.runAckedScript(ctx, cancelScript,
			[]string{k.job(shard), k.state(shard), k.due(shard, queue), k.reserved(shard), k.finished(shard), k.stats(shard)},
			id, ms(s.Now()), s.retentionMS(), queue)
		if err != nil {
			return nil, fmt.Errorf("cancel %s: %w", id, err)
		}
		l, err := replyList(v, 2)
		if err != nil {
			return nil, err
		}
		switch code, _ := replyInt(l[0]); code {
		case codeOK, codeCancelled:
			return s.Get(ctx, id)
		case codeNotFound:
			return nil, notify.ErrNotFound
		case codeFinished:
			return nil, notify.ErrFinished
		case codeNeedKeys:
			queue = replyString(l[1])
		default:
			return nil, fmt.Errorf("cancel %s: unexpected code %d", id, code)
		}
	}
	return nil, fmt.Errorf("cancel %s: the record keeps moving between queues", id)
}
