package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// Get returns a notification with its payload and history.
func (s *Store) Get(ctx context.Context, id string) (*notify.Notification, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	return s.get(ctx, id, true)
}

// GetState returns a notification with its payload but without its
// history, in one round trip: what a consumer finishing its attempt needs.
func (s *Store) GetState(ctx context.Context, id string) (*notify.Notification, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	return s.get(ctx, id, false)
}

// GetStates returns notifications as GetState does, nil for an id with no
// record, MaxBatch at a time in two round trips each: an operator's replay
// may name thousands of ids, and one round trip each would outlast the
// request on a Redis across a network.
func (s *Store) GetStates(ctx context.Context, ids []string) ([]*notify.Notification, error) {
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	out := make([]*notify.Notification, 0, len(ids))
	for chunk := range slices.Chunk(ids, MaxBatch) {
		got, err := s.getMany(ctx, chunk, false)
		if err != nil {
			return nil, fmt.Errorf("get states: %w", err)
		}
		out = append(out, got...)
	}
	return out, nil
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
// histories and what the waiting ones wait behind (a second trip only when
// needed). One that has no state yet is due at its content's first due
// time, the score its due set holds. A notification
// with an order key takes one more, after its id's stub. A missing id
// gives nil.
func (s *Store) getMany(ctx context.Context, ids []string, history bool) ([]*notify.Notification, error) {
	shards := make([]int, len(ids))
	for i, id := range ids {
		shards[i] = s.keys.shardOf(id)
	}
	contents, states, err := s.readRecords(ctx, ids, shards)
	if err != nil {
		return nil, err
	}
	var moved []int
	for i, c := range contents {
		if shard, ok := stubShard(c); ok && shard < s.keys.shards {
			shards[i] = shard
			moved = append(moved, i)
		}
	}
	if len(moved) > 0 {
		mids, mshards := make([]string, len(moved)), make([]int, len(moved))
		for j, i := range moved {
			mids[j], mshards[j] = ids[i], shards[i]
		}
		mc, ms, err := s.readRecords(ctx, mids, mshards)
		if err != nil {
			return nil, err
		}
		for j, i := range moved {
			contents[i], states[i] = mc[j], ms[j]
		}
	}
	out := make([]*notify.Notification, len(ids))
	hists := make([]*redis.SliceCmd, len(ids))
	behind := make([]*redis.StringCmd, len(ids))
	pipe := s.client.Pipeline()
	for i, id := range ids {
		if contents[i] == "" || strings.HasPrefix(contents[i], "@") {
			continue
		}
		n, histLen, err := decode(id, contents[i], states[i])
		if err != nil {
			return nil, err
		}
		out[i] = n
		shard := shards[i]
		if history && histLen > 0 {
			fields := make([]string, histLen)
			for j := range fields {
				fields[j] = histField(id, j)
			}
			hists[i] = pipe.HMGet(ctx, s.keys.hist(shard), fields...)
		}
		if strings.HasPrefix(states[i], waitingLetter) {
			behind[i] = pipe.HGet(ctx, s.keys.link(shard), "p|"+id)
		}
	}
	if pipe.Len() == 0 {
		return out, nil
	}
	if _, err := s.exec(ctx, pipe); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, n := range out {
		if hists[i] != nil {
			if err := decodeHistory(n, hists[i].Val()); err != nil {
				return nil, err
			}
		}
		if behind[i] != nil {
			n.WaitingFor = behind[i].Val()
		}
	}
	return out, nil
}

// readRecords reads the content and state of each id in its shard, in one
// round trip; "" for what is missing.
func (s *Store) readRecords(ctx context.Context, ids []string, shards []int) (contents, states []string, err error) {
	pipe := s.client.Pipeline()
	cs := make([]*redis.StringCmd, len(ids))
	ss := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cs[i] = pipe.HGet(ctx, s.keys.job(shards[i]), id)
		ss[i] = pipe.HGet(ctx, s.keys.state(shards[i]), id)
	}
	if _, err := s.exec(ctx, pipe); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	contents, states = make([]string, len(ids)), make([]string, len(ids))
	for i := range ids {
		contents[i], states[i] = cs[i].Val(), ss[i].Val()
	}
	return contents, states, nil
}

// stubShard reads a stub ("@<shard>"): the shard where the notification
// with an order key lives.
func stubShard(content string) (int, bool) {
	rest, ok := strings.CutPrefix(content, "@")
	if !ok {
		return 0, false
	}
	shard, err := strconv.Atoi(rest)
	return shard, err == nil && shard >= 0
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
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	shard := s.keys.shardOf(id)
	topic := "" // the script names the record's topic, whose keys it needs
	k := &s.keys
	for range 4 {
		v, err := s.runAckedScript(ctx, cancelScript,
			[]string{k.job(shard), k.state(shard), k.due(shard, QueuePush), k.due(shard, PullQueue(topic)),
				k.reserved(shard), k.finished(shard), k.stats(shard), k.order(shard), k.link(shard)},
			id, ms(s.Now()), s.retentionMS(), topic, k.wake(), shard)
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
		case codeMoved:
			to, ok := stubShard(replyString(l[1]))
			if !ok || to >= s.keys.shards {
				return nil, fmt.Errorf("cancel %s: bad stub %q", id, replyString(l[1]))
			}
			shard = to
		case codeNeedKeys:
			topic = replyString(l[1])
		default:
			return nil, fmt.Errorf("cancel %s: unexpected code %d", id, code)
		}
	}
	return nil, fmt.Errorf("cancel %s: the record keeps moving", id)
}
