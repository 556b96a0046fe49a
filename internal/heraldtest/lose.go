package heraldtest

import (
	"context"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// LoseReservation is a go-redis hook that, once Armed, loses the answer to
// the first reservation that took something: Redis runs it and the caller
// gets a read timeout, or, with UntilDone, waits until its context ends
// and gets that error, as a dispatcher stopped or a consumer hanging up
// while the answer is on its way. With Only set, it loses the answer of
// that reservation's script calls that name a key holding Only (a shard's
// "{3}:") and no other, as a Cluster node that stalls while others answer.
// With ThenDown, Down is set as the answer is lost: while it is, every
// command fails unsent, as in an outage that goes on after the stall, and
// Refused counts the give-backs refused (store.GiveBack first marks the
// lost call given back, in a key holding ":given:").
type LoseReservation struct {
	Armed, Lost, Down atomic.Bool
	Refused           atomic.Int64
	UntilDone         bool
	ThenDown          bool
	Only              string
}

// errDown is what a command gets while Down is set: never sent.
var errDown = &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}

// DialHook implements redis.Hook.
func (*LoseReservation) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *LoseReservation) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.Down.Load() {
			cmd.SetErr(errDown)
			return errDown
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: the store sends its scripts
// in pipelines.
func (h *LoseReservation) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.Down.Load() {
			if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return names(c, ":given:") }) {
				h.Refused.Add(1)
			}
			for _, c := range cmds {
				c.SetErr(errDown)
			}
			return errDown
		}
		err := next(ctx, cmds)
		if !h.Armed.Load() || h.Lost.Load() {
			return err
		}
		lose := func(c redis.Cmder) bool { return h.Only == "" || names(c, h.Only) }
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return lose(c) && tookSome(c) }) || !h.Lost.CompareAndSwap(false, true) {
			return err
		}
		var lost error = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		if h.UntilDone {
			<-ctx.Done()
			lost = ctx.Err()
		}
		for _, c := range cmds {
			if lose(c) {
				c.SetErr(lost)
			}
		}
		h.Down.Store(h.ThenDown)
		return lost
	}
}

// names reports whether one of c's arguments holds part.
func names(c redis.Cmder, part string) bool {
	return slices.ContainsFunc(c.Args(), func(a any) bool {
		s, ok := a.(string)
		return ok && strings.Contains(s, part)
	})
}

// tookSome reports whether c is a reservation that reserved something: a
// script over a ready list whose answer names ids.
func tookSome(c redis.Cmder) bool {
	cmd, ok := c.(interface{ Val() any }) // the store wraps its *redis.Cmd
	if !names(c, ":ready:") || !ok || c.Err() != nil {
		return false
	}
	shards, _ := cmd.Val().([]any)
	for _, s := range shards {
		if parts, _ := s.([]any); len(parts) > 1 {
			if ids, _ := parts[1].([]any); len(ids) > 0 {
				return true
			}
		}
	}
	return false
}
