package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Wake tells that a shard's queue has work due at Due, earlier than its
// previous head; or, with Cancelled set, that a cancel ended the
// reservation Receipt of the notification Cancelled, which a dispatcher
// may hold ahead of a busy worker and must then not attempt.
type Wake struct {
	Queue string
	Shard int
	Due   time.Time

	Cancelled, Receipt string
}

// Subscribe delivers wake-ups published by enqueues, retries and replays,
// and the cancels of reserved notifications, until ctx ends. Messages lost
// while the connection is down are not replayed, so subscribers must still
// poll now and then. ready is closed once the subscription is confirmed.
func (s *Store) Subscribe(ctx context.Context) (wakes <-chan Wake, ready <-chan struct{}) {
	out := make(chan Wake, 256)
	rdy := make(chan struct{})
	go func() {
		defer close(out)
		ps := s.client.Subscribe(ctx, s.keys.wake())
		defer ps.Close()
		for {
			_, err := ps.Receive(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			s.cfg.Logger.WarnContext(ctx, "store: subscribe to wake-ups failed; retrying", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		close(rdy)
		ch := ps.Channel(redis.WithChannelSize(256))
		for {
			select {
			case <-ctx.Done():
				return
			case msg, ok := <-ch:
				if !ok {
					return
				}
				if w, err := parseWake(msg.Payload); err == nil {
					select {
					case out <- w:
					default: // a slow reader only loses hints, never work
					}
				}
			}
		}
	}()
	return out, rdy
}

// cancelWake starts the message of a cancelled reservation, "cancel <id>
// <receipt>", which no queue's name is.
const cancelWake = "cancel"

func parseWake(s string) (Wake, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Wake{}, errors.New("bad wake message")
	}
	if f[0] == cancelWake {
		return Wake{Cancelled: f[1], Receipt: f[2]}, nil
	}
	shard, err1 := strconv.Atoi(f[1])
	due, err2 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Wake{}, err
	}
	return Wake{Queue: f[0], Shard: shard, Due: fromMS(due)}, nil
}
