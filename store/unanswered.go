package store

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/heraldhq/herald/notify"
)

// maxUnanswered bounds the lost reservations an Unanswered keeps: in a
// long outage the oldest have since been reaped (their ttr ran out), or
// never reached Redis, so they are the ones dropped.
const maxUnanswered = 64

// Unanswered keeps, for a caller of Reserve, the reservations it could not
// give back when their answers were lost, so that it gives them back
// (GiveBack) once Redis answers again: left alone, what they reserved would
// wait out its ttr for no one and then count an attempt never made, the
// last of a backoff array sending it to the dead letters unsent. Its zero
// value is ready to use, and it is safe for concurrent use.
type Unanswered struct {
	mu   sync.Mutex // guards lost
	lost []LostReservation
}

// Keep keeps the lost reservation of err, a Reserve's error, when it is a
// *ReserveError, and reports whether it was.
func (u *Unanswered) Keep(err error) bool {
	var re *ReserveError
	if !errors.As(err, &re) {
		return false
	}
	u.keep(re.Lost)
	return true
}

// KeepUnstarted keeps the reservations that hold ns, reserved notifications
// whose give-back (GiveBackUnstarted) failed, as those of a caller that went
// away before it got them: GiveBack gives back what they still hold. One
// without a receipt or a deadline is left out.
func (u *Unanswered) KeepUnstarted(ns []*notify.Notification) {
	var calls []LostReservation
	for _, n := range ns {
		// A receipt is its call's prefix, which ends in a dot, and the
		// shard (receiptPrefix).
		dot := strings.LastIndexByte(n.Receipt, '.')
		shard, err := strconv.Atoi(n.Receipt[dot+1:])
		if dot < 0 || err != nil || n.Deadline == nil {
			continue
		}
		l := LostReservation{Queue: queueOf(n.Channel, n.Topic), Receipt: n.Receipt[:dot+1], At: *n.Deadline}
		i := 0
		for i < len(calls) && (calls[i].Queue != l.Queue || calls[i].Receipt != l.Receipt) {
			i++
		}
		if i == len(calls) {
			calls = append(calls, l)
		}
		c := &calls[i]
		if !c.At.Before(l.At) {
			c.At = l.At // the earliest deadline: the others' are after it
		}
		if !slices.Contains(c.Shards, shard) {
			c.Shards = append(c.Shards, shard)
		}
	}
	for _, l := range calls {
		u.keep(l)
	}
}

// keep keeps l, dropping the oldest kept when maxUnanswered are.
func (u *Unanswered) keep(l LostReservation) {
	if len(l.Shards) == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.lost = append(u.lost[max(len(u.lost)-maxUnanswered+1, 0):], l)
}

// GiveBack gives back, unattempted, what the kept reservations still hold
// (see Store.GiveBack), and returns how many notifications it gave back per
// queue, for the caller to log: nil when it gave back none. What it could
// not look at (Redis unreachable again, or ctx ended) stays kept for a
// later call, and err is the first such failure. Concurrent calls share
// the work: each kept reservation is given back by one of them.
func (u *Unanswered) GiveBack(ctx context.Context, s interface {
	GiveBack(context.Context, LostReservation) (int, error)
}) (given map[string]int, err error) {
	u.mu.Lock()
	lost := u.lost
	u.lost = nil
	u.mu.Unlock()
	var left []LostReservation
	for i, l := range lost {
		if ctx.Err() != nil {
			left = append(left, lost[i:]...)
			err = cmp.Or(err, ctx.Err())
			break
		}
		n, gerr := s.GiveBack(ctx, l)
		if gerr != nil {
			left = append(left, l)
			err = cmp.Or(err, gerr)
			continue
		}
		if n > 0 {
			if given == nil {
				given = map[string]int{}
			}
			given[l.Queue] += n
		}
	}
	if len(left) > 0 {
		u.mu.Lock()
		// Ahead of those kept meanwhile: they are older.
		all := append(left, u.lost...)
		u.lost = all[max(len(all)-maxUnanswered, 0):]
		u.mu.Unlock()
	}
	return given, err
}
