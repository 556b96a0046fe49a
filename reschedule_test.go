package herald_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/sms"
	"github.com/heraldhq/herald/notify/webhook"
	"github.com/heraldhq/herald/policy"
)

// arrival is one request as the receiver saw it.
type arrival struct {
	at      time.Time
	id      string // webhook-id, or the SMS's text
	attempt string // Herald-Attempt of a webhook
	key     string // Idempotency-Key of an SMS
	body    string
}

// receiver is a merchant's webhook endpoint and an SMS gateway on
// loopback: it notes every request when it arrives and answers what
// answer says (200 by default).
type receiver struct {
	url string

	mu     sync.Mutex // guards got and answer
	got    []arrival
	answer func(a arrival) int
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(req.Body)
		a := arrival{at: at, id: req.Header.Get(webhook.HeaderID), attempt: req.Header.Get(webhook.HeaderAttempt),
			key: req.Header.Get("Idempotency-Key"), body: string(body)}
		if req.URL.Path == "/sms" {
			var m struct{ Body string }
			_ = json.Unmarshal(body, &m)
			a.id = m.Body
		}
		r.mu.Lock()
		r.got = append(r.got, a)
		answer := r.answer
		r.mu.Unlock()
		code := http.StatusOK
		if answer != nil {
			code = answer(a)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// arrivals returns what came for id so far.
func (r *receiver) arrivals(id string) []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []arrival
	for _, a := range r.got {
		if a.id == id {
			out = append(out, a)
		}
	}
	return out
}

// all returns everything that came so far.
func (r *receiver) all() []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]arrival(nil), r.got...)
}

func (r *receiver) setAnswer(f func(a arrival) int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = f
}

// hold makes the requests match picks wait for an answer, code, until the
// returned release is called (at the latest when the test ends).
func (r *receiver) hold(t *testing.T, match func(a arrival) bool, code int) (release func()) {
	ch := make(chan struct{})
	release = sync.OnceFunc(func() { close(ch) })
	t.Cleanup(release) // before the server's Close, which waits for held requests
	r.setAnswer(func(a arrival) int {
		if match(a) {
			<-ch
		}
		return code
	})
	return release
}

// waitArrivals waits until id has come n times, and returns its arrivals.
func (r *receiver) waitArrivals(t *testing.T, id string, n int) []arrival {
	t.Helper()
	require.Eventually(t, func() bool { return len(r.arrivals(id)) >= n }, 15*time.Second, 2*time.Millisecond,
		"%s did not reach the receiver %d times in 15s", id, n)
	return r.arrivals(id)
}

// quietLogger drops the senders' warnings of an unsigned webhook.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startDispatcherWith starts a library worker in ns, with that many
// workers (0: the default), that sends webhooks and SMS (through an http
// gateway) to rcv, and stops it at the test's end.
func startDispatcherWith(t *testing.T, rdb redis.UniversalClient, ns string, rcv *receiver, concurrency int) {
	t.Helper()
	set, err := herald.NewPolicies(nil, nil)
	require.NoError(t, err)
	common := httpsend.Common{Rules: policy.CurrentRules(func() *policy.Set { return set }),
		HTTP: httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}, Logger: quietLogger()}}
	hook, err := webhook.New(&webhook.Config{Common: common})
	require.NoError(t, err)
	text, err := sms.New(&sms.Config{URL: rcv.url + "/sms", Common: common})
	require.NoError(t, err)
	w, err := herald.NewWorker(rdb, &herald.WorkerConfig{Namespace: ns, Policies: set, Logger: heraldtest.Logger(t),
		Senders: map[string]herald.Sender{herald.ChannelWebhook: hook, herald.ChannelSMS: text}, Concurrency: concurrency})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
}

// deliver returns a client of a namespace of the test's own, and the
// receiver that as many dispatchers of that namespace send to.
func deliver(t *testing.T, dispatchers int) (*herald.Client, *receiver) {
	t.Helper()
	rdb, ns, c := connect(t, nil)
	rcv := newReceiver(t)
	for range dispatchers {
		startDispatcherWith(t, rdb, ns, rcv, 0)
	}
	return c, rcv
}

// smsText is the text of a reminder of version v.
func smsText(id string, v int) string { return fmt.Sprintf("%s v%d", id, v) }

// remind enqueues (or, with Replace, moves) reminder id, version v, due at.
func remind(ctx context.Context, c *herald.Client, id string, v int, at time.Time, opts ...herald.EnqueueOption) (*herald.EnqueueResult, error) {
	return c.Enqueue(ctx, "appointment-reminder", map[string]string{"text": smsText(id, v)},
		append([]herald.EnqueueOption{herald.ID(id), herald.Target("+14155550100"), herald.SendAt(at)}, opts...)...)
}

// notifyMerchant enqueues a webhook id of topic to rcv.
func notifyMerchant(ctx context.Context, c *herald.Client, rcv *receiver, topic, id string, payload any, opts ...herald.EnqueueOption) (*herald.EnqueueResult, error) {
	return c.Enqueue(ctx, topic, payload, append([]herald.EnqueueOption{herald.ID(id), herald.Target(rcv.url + "/notify")}, opts...)...)
}

// waitRecord waits until id's record satisfies ok, and returns it.
func waitRecord(t *testing.T, c *herald.Client, id string, ok func(n *herald.Notification) bool, what string) *herald.Notification {
	t.Helper()
	var n *herald.Notification
	require.Eventually(t, func() bool {
		got, err := c.Get(context.Background(), id)
		if err != nil || !ok(got) {
			return false
		}
		n = got
		return true
	}, 10*time.Second, time.Millisecond, "%s: %s", id, what)
	return n
}

// stateOf returns id's state now.
func stateOf(t *testing.T, c *herald.Client, id string) herald.State {
	t.Helper()
	n, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	return n.State
}

// retrying reports whether n waits out its backoff after attempts failed.
func retrying(attempts int) func(n *herald.Notification) bool {
	return func(n *herald.Notification) bool { return n.State == herald.StateScheduled && n.Attempts == attempts }
}

// TestReminderNeverEarly: a reminder asked for at an instant given to the
// sub-millisecond, in any time zone, reaches the gateway no earlier than
// that instant, as SendAt promises, and soon after it.
func TestReminderNeverEarly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	zones := []*time.Location{time.UTC, time.FixedZone("NPT", 5*3600+45*60), time.FixedZone("odd", -(3*3600 + 17*60 + 31)),
		time.FixedZone("LINT", 14*3600)}
	asked := map[string]time.Time{}
	base := time.Now().Add(300 * time.Millisecond)
	for i := range 24 {
		at := base.Add(time.Duration(i)*7*time.Millisecond + time.Duration(i*37111)%time.Millisecond).In(zones[i%len(zones)])
		id := fmt.Sprintf("appt-%d", i)
		_, err := remind(ctx, c, id, 0, at)
		require.NoError(t, err)
		asked[smsText(id, 0)] = at
	}
	for text, at := range asked {
		got := rcv.waitArrivals(t, text, 1)
		require.Len(t, got, 1, text)
		require.False(t, got[0].at.Before(at), "%s arrived at %s, before %s", text, got[0].at.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		require.Less(t, got[0].at.Sub(at), 5*time.Second, text)
	}
}

// TestReminderMovesWhileTheDispatcherRuns: a reminder moved with Replace
// goes out at its new time, in its new version, once: moved earlier (an
// hour off, to a moment from now), later (due in a moment, moved a
// second on), and into the past (at once).
func TestReminderMovesWhileTheDispatcherRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	for _, tt := range []struct {
		name        string
		first, then time.Duration // from now
	}{
		{name: "Earlier", first: time.Hour, then: 200 * time.Millisecond},
		{name: "Later", first: 150 * time.Millisecond, then: time.Second},
		{name: "IntoThePast", first: time.Hour, then: -time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := tt.name
			_, err := remind(ctx, c, id, 0, time.Now().Add(tt.first))
			require.NoError(t, err)
			time.Sleep(50 * time.Millisecond) // the dispatcher has planned for the first time
			asked := time.Now()
			at := asked.Add(tt.then)
			res, err := remind(ctx, c, id, 1, at, herald.Replace())
			require.NoError(t, err)
			require.Equal(t, herald.Replaced, res.Status)
			got := rcv.waitArrivals(t, smsText(id, 1), 1)
			require.False(t, got[0].at.Before(at), "moved, it went out early")
			require.Less(t, got[0].at.Sub(asked), max(tt.then, 0)+5*time.Second)
			time.Sleep(100 * time.Millisecond)
			require.Empty(t, rcv.arrivals(smsText(id, 0)), "the old version went out")
			require.Len(t, rcv.arrivals(smsText(id, 1)), 1)
		})
	}
}

// TestReminderMovedInATightLoop moves one reminder again and again while
// two dispatchers run, each move a few milliseconds ahead, so that moves
// and attempts cross. Once a move is answered Replaced, no version before
// it reaches the gateway any more; a move refused because an attempt is
// under way (ErrReserved) leaves that attempt to finish. The last version
// moved goes out, once.
func TestReminderMovedInATightLoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 2)
	const id = "tight"
	replacedAt := map[int]time.Time{} // version -> when its move was answered
	last := -1
	for v := range 400 {
		res, err := remind(ctx, c, id, v, time.Now().Add(time.Duration(v%7)*time.Millisecond), herald.Replace())
		switch {
		case err == nil:
			require.Contains(t, []herald.EnqueueStatus{herald.Created, herald.Replaced}, res.Status)
			replacedAt[v] = time.Now()
			last = v
		case errors.Is(err, herald.ErrReserved):
		default:
			require.NoError(t, err)
		}
		time.Sleep(time.Duration(v%5) * time.Millisecond)
	}
	rcv.waitArrivals(t, smsText(id, last), 1)
	time.Sleep(200 * time.Millisecond)
	for _, a := range rcv.all() {
		var v int
		_, err := fmt.Sscanf(strings.TrimPrefix(a.id, id+" "), "v%d", &v)
		require.NoError(t, err, a.id)
		for later, at := range replacedAt {
			if later > v && at.Before(a.at) {
				t.Errorf("version %d arrived at %s, after version %d replaced it at %s",
					v, a.at.Format(time.RFC3339Nano), later, at.Format(time.RFC3339Nano))
				break
			}
		}
	}
	require.Len(t, rcv.arrivals(smsText(id, last)), 1, "the last version, once")
}

// raceTheDueTime enqueues reminders due in 20ms and, for each, calls act
// from 4ms before to 4ms after it falls due, two dispatchers serving them.
// It returns, of the ids act kept (reported true), when act answered.
func raceTheDueTime(t *testing.T, c *herald.Client, act func(id string) bool) map[string]time.Time {
	t.Helper()
	kept := map[string]time.Time{}
	for i := range 60 {
		id := fmt.Sprintf("race-%d", i)
		due := time.Now().Add(20 * time.Millisecond)
		_, err := remind(context.Background(), c, id, 0, due)
		require.NoError(t, err)
		time.Sleep(time.Until(due.Add(time.Duration(i%9-4) * time.Millisecond)))
		if act(id) {
			kept[id] = time.Now()
		}
	}
	time.Sleep(300 * time.Millisecond)
	return kept
}

// TestCancelRacingTheDueTime cancels reminders a few milliseconds before
// and after they fall due. A reminder sent at all is sent once, before the
// cancel answered, and that attempt is in its history; either way it stays
// cancelled.
func TestCancelRacingTheDueTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 2)
	cancelled := raceTheDueTime(t, c, func(id string) bool {
		_, err := c.Cancel(ctx, id)
		if errors.Is(err, herald.ErrFinished) {
			return false // sent before the cancel
		}
		require.NoError(t, err)
		return true
	})
	for id, answered := range cancelled {
		n, err := c.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, herald.StateCancelled, n.State, id)
		got := rcv.arrivals(smsText(id, 0))
		require.LessOrEqual(t, len(got), 1, id)
		for _, a := range got {
			require.True(t, a.at.Before(answered), "%s reached the gateway at %s, after its cancel answered at %s",
				id, a.at.Format(time.RFC3339Nano), answered.Format(time.RFC3339Nano))
		}
		require.Len(t, n.History, len(got), "%s: what reached the gateway is in the history", id)
	}
}

// TestReplaceRacingTheDueTime moves reminders an hour later a few
// milliseconds before and after they fall due. A move answered Replaced
// sends the old version no more: what reached the gateway of it did so
// before the move was answered.
func TestReplaceRacingTheDueTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 2)
	moved := raceTheDueTime(t, c, func(id string) bool {
		res, err := remind(ctx, c, id, 1, time.Now().Add(time.Hour), herald.Replace())
		if errors.Is(err, herald.ErrReserved) {
			return false // its attempt is under way
		}
		require.NoError(t, err)
		require.Equal(t, herald.Replaced, res.Status)
		return true
	})
	for id, answered := range moved {
		for _, a := range rcv.arrivals(smsText(id, 0)) {
			require.True(t, a.at.Before(answered), "%s: the old version arrived at %s, after the move was answered at %s",
				id, a.at.Format(time.RFC3339Nano), answered.Format(time.RFC3339Nano))
		}
		require.Empty(t, rcv.arrivals(smsText(id, 1)), "%s: the moved one went out early", id)
		require.Equal(t, herald.StateScheduled, stateOf(t, c, id), id)
	}
}

// TestPaymentNotificationIdempotent: a payment service's retry of an
// enqueue with the same id and content, after the merchant was notified,
// is Existing and notifies no one again, with Replace or without; a
// replace with other content (a corrected amount) notifies again, from
// attempt 0.
func TestPaymentNotificationIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	pay := func(amount string, opts ...herald.EnqueueOption) (*herald.EnqueueResult, error) {
		return notifyMerchant(ctx, c, rcv, "order-notify", "order-1001-paid",
			map[string]string{"out_trade_no": "1001", "total_amount": amount}, opts...)
	}
	_, err := pay("9.90")
	require.NoError(t, err)
	rcv.waitArrivals(t, "order-1001-paid", 1)
	require.Equal(t, herald.StateSucceeded, waitFinished(c, "order-1001-paid").State)
	for _, opts := range [][]herald.EnqueueOption{nil, {herald.Replace()}} {
		res, err := pay("9.90", opts...)
		require.NoError(t, err)
		require.Equal(t, herald.Existing, res.Status)
		require.Equal(t, herald.StateSucceeded, res.Notification.State)
	}
	time.Sleep(200 * time.Millisecond)
	require.Len(t, rcv.arrivals("order-1001-paid"), 1, "notified again by a retried enqueue")

	res, err := pay("19.90", herald.Replace())
	require.NoError(t, err)
	require.Equal(t, herald.Replaced, res.Status)
	got := rcv.waitArrivals(t, "order-1001-paid", 2)
	require.Contains(t, got[1].body, "19.90")
	require.Equal(t, "0", got[1].attempt, "a replaced notification starts again from attempt 0")
}

// TestReplaceOfAFailingNotification: a notification waiting out its
// backoff after failed attempts (one for a century), or dead, is
// rescheduled by a replace: it goes out at its new time from attempt 0,
// and its old schedule sends nothing more. One cancelled in its backoff
// is not retried.
func TestReplaceOfAFailingNotification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	rcv.setAnswer(func(a arrival) int {
		if strings.Contains(a.body, `"v":0`) {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	hook := func(id string, v int, opts ...herald.EnqueueOption) (*herald.EnqueueResult, error) {
		return notifyMerchant(ctx, c, rcv, "payments", id, map[string]int{"v": v}, opts...)
	}
	const century = 100 * 365 * 24 * time.Hour
	for _, tt := range []struct {
		name    string
		backoff []time.Duration
		failed  int  // attempts that fail before the replace
		dead    bool // dead then, rather than waiting out its backoff
	}{
		{name: "InItsBackoff", backoff: []time.Duration{0, 300 * time.Millisecond, time.Hour}, failed: 2},
		{name: "CenturyBackoff", backoff: []time.Duration{0, century, century}, failed: 1},
		{name: "Dead", backoff: []time.Duration{0}, failed: 1, dead: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := tt.name
			_, err := hook(id, 0, herald.Backoff(tt.backoff...))
			require.NoError(t, err)
			rcv.waitArrivals(t, id, tt.failed)
			if tt.dead {
				require.Equal(t, herald.StateDead, waitFinished(c, id).State)
			} else {
				n := waitRecord(t, c, id, retrying(tt.failed), "waits out its backoff")
				require.NotNil(t, n.NextAttemptAt)
				require.WithinDuration(t, n.History[tt.failed-1].FinishedAt.Add(tt.backoff[tt.failed]), *n.NextAttemptAt, time.Millisecond)
			}
			at := time.Now().Add(100 * time.Millisecond)
			res, err := hook(id, 1, herald.Backoff(tt.backoff...), herald.SendAt(at), herald.Replace())
			require.NoError(t, err)
			require.Equal(t, herald.Replaced, res.Status)
			require.Equal(t, 0, res.Notification.Attempts)
			got := rcv.waitArrivals(t, id, tt.failed+1)
			require.False(t, got[tt.failed].at.Before(at))
			require.Equal(t, "0", got[tt.failed].attempt)
			require.Contains(t, got[tt.failed].body, `"v":1`)
			require.Equal(t, herald.StateSucceeded, waitFinished(c, id).State)
			require.Len(t, rcv.arrivals(id), tt.failed+1)
		})
	}
	t.Run("CancelledInItsBackoff", func(t *testing.T) {
		t.Parallel()
		_, err := hook("cancel-backoff", 0, herald.Backoff(0, 200*time.Millisecond, 200*time.Millisecond))
		require.NoError(t, err)
		rcv.waitArrivals(t, "cancel-backoff", 1)
		waitRecord(t, c, "cancel-backoff", retrying(1), "waits out its backoff")
		n, err := c.Cancel(ctx, "cancel-backoff")
		require.NoError(t, err)
		require.Equal(t, herald.StateCancelled, n.State)
		time.Sleep(600 * time.Millisecond)
		require.Len(t, rcv.arrivals("cancel-backoff"), 1, "sent after it was cancelled")
	})
}

// TestOrderKeyLineWithCancel: a trade's "paid" notification fails and
// waits out its backoff; "refunded", behind it on the same order key,
// waits, and cannot be replaced there; cancelling "paid" lets "refunded"
// go at once. A "closed" behind a cancelled "refunded" waits only for
// what is left before it.
func TestOrderKeyLineWithCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	rcv.setAnswer(func(a arrival) int {
		if strings.HasSuffix(a.id, ".paid") && a.attempt == "0" {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	hook := func(id string, opts ...herald.EnqueueOption) (*herald.EnqueueResult, error) {
		trade, status, _ := strings.Cut(id, ".")
		return notifyMerchant(ctx, c, rcv, "order-notify", id, map[string]string{"status": status},
			append([]herald.EnqueueOption{herald.OrderKey(trade)}, opts...)...)
	}

	t.Run("CancelTheHead", func(t *testing.T) {
		t.Parallel()
		_, err := hook("t1.paid", herald.Backoff(0, time.Hour))
		require.NoError(t, err)
		_, err = hook("t1.refunded")
		require.NoError(t, err)
		rcv.waitArrivals(t, "t1.paid", 1)
		time.Sleep(100 * time.Millisecond)
		require.Empty(t, rcv.arrivals("t1.refunded"), "overtook the failed paid")
		_, err = hook("t1.refunded", herald.Delay(time.Minute), herald.Replace())
		require.ErrorIs(t, err, herald.ErrOrdered)
		cancelled := time.Now()
		_, err = c.Cancel(ctx, "t1.paid")
		require.NoError(t, err)
		got := rcv.waitArrivals(t, "t1.refunded", 1)
		require.Less(t, got[0].at.Sub(cancelled), 5*time.Second)
		require.Len(t, rcv.arrivals("t1.paid"), 1)
	})
	t.Run("CancelTheMiddle", func(t *testing.T) {
		t.Parallel()
		_, err := hook("t2.paid", herald.Backoff(0, 300*time.Millisecond))
		require.NoError(t, err)
		_, err = hook("t2.refunded")
		require.NoError(t, err)
		_, err = hook("t2.closed")
		require.NoError(t, err)
		_, err = c.Cancel(ctx, "t2.refunded")
		require.NoError(t, err)
		paid := rcv.waitArrivals(t, "t2.paid", 2)
		closed := rcv.waitArrivals(t, "t2.closed", 1)
		require.True(t, closed[0].at.After(paid[1].at), "closed went before paid succeeded")
		time.Sleep(100 * time.Millisecond)
		require.Empty(t, rcv.arrivals("t2.refunded"), "a cancelled one went out")
	})
}

// TestOrderKeyReplaceOfAFinishedOne: "paid" was delivered, "refunded"
// behind it on the same key fails and waits out its backoff; a replace of
// "paid" (a corrected notice) schedules it anew, at the back of its key's
// line: it does not go out while "refunded", now before it, is retrying.
func TestOrderKeyReplaceOfAFinishedOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	var refundOK atomic.Bool
	rcv.setAnswer(func(a arrival) int {
		if a.id == "t4.refunded" && !refundOK.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	hook := func(id, status string, opts ...herald.EnqueueOption) (*herald.EnqueueResult, error) {
		return notifyMerchant(ctx, c, rcv, "order-notify", id, map[string]string{"status": status},
			append([]herald.EnqueueOption{herald.OrderKey("t4"), herald.Backoff(0, 500*time.Millisecond, 500*time.Millisecond)}, opts...)...)
	}
	_, err := hook("t4.paid", "paid")
	require.NoError(t, err)
	_, err = hook("t4.refunded", "refunded")
	require.NoError(t, err)
	require.Equal(t, herald.StateSucceeded, waitFinished(c, "t4.paid").State)
	rcv.waitArrivals(t, "t4.refunded", 1)
	res, err := hook("t4.paid", "paid-corrected", herald.Replace())
	require.NoError(t, err)
	require.Equal(t, herald.Replaced, res.Status)
	require.Equal(t, "t4.refunded", res.Notification.WaitingFor)
	time.Sleep(200 * time.Millisecond)
	require.Len(t, rcv.arrivals("t4.paid"), 1, "the replaced paid went out while refunded, before it in the line, was retrying")
	refundOK.Store(true)
	got := rcv.waitArrivals(t, "t4.paid", 2)
	require.Contains(t, got[1].body, "paid-corrected")
}

// TestPayloadAtTheLimit: a payload of exactly the default MaxPayload is
// taken and reaches the merchant byte for byte; one byte more is refused,
// naming the payload.
func TestPayloadAtTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	const limit = 256 << 10
	payload := `{"pad":"` + strings.Repeat("x", limit-len(`{"pad":""}`)) + `"}`
	require.Len(t, payload, limit)
	_, err := notifyMerchant(ctx, c, rcv, "payments", "big", json.RawMessage(payload))
	require.NoError(t, err)
	got := rcv.waitArrivals(t, "big", 1)
	require.Equal(t, payload, got[0].body)

	_, err = notifyMerchant(ctx, c, rcv, "payments", "too-big", json.RawMessage(payload[:len(payload)-2]+`x"}`))
	var fe *notify.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "payload", fe.Field)
}

// TestSendAtZoneIsNotContent: the appointment service retries an enqueue
// whose answer was lost, giving the same instant in another time zone (one
// instance formats times in UTC, another in the clinic's zone): it is the
// same reminder (Existing), not a conflict.
func TestSendAtZoneIsNotContent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, c := connect(t, nil)
	at := time.Date(2030, time.March, 31, 6, 30, 0, 0, time.UTC)
	res, err := remind(ctx, c, "zones", 0, at)
	require.NoError(t, err)
	require.Equal(t, herald.Created, res.Status)
	for _, zone := range []*time.Location{time.FixedZone("CEST", 2*3600), time.FixedZone("PDT", -7*3600)} {
		res, err = remind(ctx, c, "zones", 0, at.In(zone))
		require.NoError(t, err, zone.String())
		require.Equal(t, herald.Existing, res.Status, zone.String())
	}
}

// TestCancelDuringAnAttempt: a notification cancelled while the merchant
// holds its request is not attempted again, whether the merchant then
// answers 503 (a failure its policy retries) or holds the request past the
// notification's ttr (the reaper takes the reservation back); it stays
// cancelled, and an attempt that ended is in its history.
func TestCancelDuringAnAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	release := rcv.hold(t, func(a arrival) bool { return a.attempt == "0" }, http.StatusServiceUnavailable)
	_, err := notifyMerchant(ctx, c, rcv, "payments", "fails", nil, herald.Backoff(0, 0, 0))
	require.NoError(t, err)
	_, err = notifyMerchant(ctx, c, rcv, "payments", "hung", nil, herald.TTR(500*time.Millisecond), herald.Backoff(0, 0, 0))
	require.NoError(t, err)
	// Both at once, within hung's ttr: the cancel of a reserved
	// notification answers once every dispatcher has heard of it.
	var wg sync.WaitGroup
	for _, id := range []string{"fails", "hung"} {
		rcv.waitArrivals(t, id, 1)
		wg.Go(func() {
			n, err := c.Cancel(ctx, id)
			assert.NoError(t, err, id)
			if err == nil {
				assert.Equal(t, herald.StateCancelled, n.State, id)
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // past hung's ttr
	release()
	n := waitRecord(t, c, "fails", func(n *herald.Notification) bool { return len(n.History) == 1 }, "the attempt under way is recorded")
	require.Equal(t, "retry", string(n.History[0].Outcome))
	time.Sleep(300 * time.Millisecond)
	for _, id := range []string{"fails", "hung"} {
		require.Len(t, rcv.arrivals(id), 1, "%s attempted again after it was cancelled", id)
		require.Equal(t, herald.StateCancelled, stateOf(t, c, id), id)
	}
}

// TestLongestBackoffArray: a notification with the longest backoff array
// (notify.MaxBackoff entries) to a merchant that always fails is tried
// exactly that many times, attempts 0 to 99 in order, then dead with all
// of them in its history.
func TestLongestBackoffArray(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	rcv.setAnswer(func(arrival) int { return http.StatusServiceUnavailable })
	_, err := notifyMerchant(ctx, c, rcv, "payments", "longest", nil, herald.Backoff(make([]time.Duration, notify.MaxBackoff)...))
	require.NoError(t, err)
	n := waitFinished(c, "longest")
	require.Equal(t, herald.StateDead, n.State)
	require.Len(t, n.History, notify.MaxBackoff)
	got := rcv.arrivals("longest")
	require.Len(t, got, notify.MaxBackoff)
	for i, a := range got {
		require.Equal(t, fmt.Sprint(i), a.attempt)
	}
}

// TestMovedReminderIsANewMessage: the SMS gateway gets one Idempotency-Key
// for every attempt of a reminder, and a new one for the reminder moved
// with Replace after it went out, so that a gateway that drops repeated
// keys sends the moved reminder.
func TestMovedReminderIsANewMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	rcv.setAnswer(func(a arrival) int {
		if a.id == smsText("moved", 0) && len(rcv.arrivals(a.id)) == 1 {
			return http.StatusServiceUnavailable // the first attempt fails, the second goes out
		}
		return http.StatusOK
	})
	_, err := remind(ctx, c, "moved", 0, time.Now(), herald.Backoff(0, 0))
	require.NoError(t, err)
	first := rcv.waitArrivals(t, smsText("moved", 0), 2)
	require.Equal(t, first[0].key, first[1].key, "the attempts of one reminder")
	require.Equal(t, herald.StateSucceeded, waitFinished(c, "moved").State)
	res, err := remind(ctx, c, "moved", 1, time.Now(), herald.Backoff(0, 0), herald.Replace())
	require.NoError(t, err)
	require.Equal(t, herald.Replaced, res.Status)
	moved := rcv.waitArrivals(t, smsText("moved", 1), 1)
	require.NotEmpty(t, moved[0].key)
	require.NotEqual(t, first[0].key, moved[0].key, "the moved reminder has the key of the one that went out")
}

// TestRetriesKeepTheirBackoff: a merchant that fails three times before
// it answers gets each retry no sooner than its backoff entry after the
// failure before it, measured where the requests arrive.
func TestRetriesKeepTheirBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rcv := deliver(t, 1)
	rcv.setAnswer(func(a arrival) int {
		if a.attempt != "3" {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	backoff := []time.Duration{0, 0, 150 * time.Millisecond, 300 * time.Millisecond}
	_, err := notifyMerchant(ctx, c, rcv, "payments", "retried", nil, herald.Backoff(backoff...))
	require.NoError(t, err)
	got := rcv.waitArrivals(t, "retried", len(backoff))
	for i := 1; i < len(got); i++ {
		require.GreaterOrEqual(t, got[i].at.Sub(got[i-1].at), backoff[i], "attempt %d", i)
		require.Less(t, got[i].at.Sub(got[i-1].at), backoff[i]+5*time.Second, "attempt %d", i)
	}
	require.Equal(t, herald.StateSucceeded, waitFinished(c, "retried").State)
	require.Len(t, rcv.arrivals("retried"), len(backoff))
}

// slowWakes delays, while armed, every read of a connection that brings
// a pub/sub message: the dispatcher hears the announcements Redis
// publishes (a cancel's, among them) that much later, as it does when its
// subscription's connection is slow or a Cluster relays the message from
// another node.
type slowWakes struct {
	armed atomic.Bool
	delay time.Duration
}

func (h *slowWakes) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &slowWakesConn{Conn: conn, hook: h}, nil
	}
}
func (h *slowWakes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *slowWakes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type slowWakesConn struct {
	net.Conn
	hook *slowWakes
}

func (c *slowWakesConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.hook.armed.Load() && bytes.Contains(p[:n], []byte("message\r\n")) {
		time.Sleep(c.hook.delay)
	}
	return n, err
}

// TestCancelOfAReminderReservedAhead: a reminder reserved ahead of a busy
// worker, and cancelled before the worker is free, is not attempted, as
// Cancel promises ("One a dispatcher reserved ahead of its busy workers,
// and has not started, is not attempted"), however long the cancel's
// announcement takes to reach the dispatcher; nor is its old version
// when, cancelled, it is then moved to a new time (the appointment
// rebooked).
func TestCancelOfAReminderReservedAhead(t *testing.T) {
	t.Parallel()
	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		testCancelOfAReminderReservedAhead(t, false)
	})
	t.Run("CancelledThenMoved", func(t *testing.T) {
		t.Parallel()
		testCancelOfAReminderReservedAhead(t, true)
	})
	t.Run("CancelHeardThenMovedToNow", testCancelHeardThenMovedToNow)
}

// testCancelHeardThenMovedToNow: the reminder reserved ahead is cancelled,
// the dispatcher hears it in good time, and the appointment is then
// rebooked for now: the reminder, moved with Replace, is reserved ahead
// again while the worker is still busy. The worker, once free, sends the
// new version alone.
func testCancelHeardThenMovedToNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, c := connect(t, nil)
	rcv := newReceiver(t)
	release, reserved := reserveAheadOfBusyWorker(t, rdb, ns, c, rcv)
	_, err := c.Cancel(ctx, "reminder")
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // the dispatcher hears the cancel
	res, err := remind(ctx, c, "reminder", 1, time.Now(), herald.Replace())
	require.NoError(t, err)
	require.Equal(t, herald.Replaced, res.Status)
	answered := time.Now()
	require.Eventually(t, reserved, 10*time.Second, time.Millisecond, "the moved reminder reserved ahead")
	close(release)
	rcv.waitArrivals(t, smsText("reminder", 1), 1)
	time.Sleep(200 * time.Millisecond)
	for _, a := range rcv.arrivals(smsText("reminder", 0)) {
		t.Errorf("the cancelled version reached the gateway at %s, %s after the move was answered",
			a.at.Format(time.RFC3339Nano), a.at.Sub(answered))
	}
	require.Len(t, rcv.arrivals(smsText("reminder", 1)), 1)
}

// reserveAheadOfBusyWorker starts a dispatcher of one worker on rdb, keeps
// that worker busy with an SMS the receiver holds until release is closed,
// and enqueues the reminder due now, which the dispatcher then reserves
// ahead of its busy worker. reserved reports whether it is reserved.
func reserveAheadOfBusyWorker(t *testing.T, rdb redis.UniversalClient, ns string, c *herald.Client, rcv *receiver) (release chan struct{}, reserved func() bool) {
	t.Helper()
	ctx := context.Background()
	release = make(chan struct{})
	rcv.setAnswer(func(a arrival) int {
		if a.id == smsText("slow", 0) {
			<-release
		}
		return http.StatusOK
	})
	startDispatcherWith(t, rdb, ns, rcv, 1)
	_, err := remind(ctx, c, "quick", 0, time.Now()) // a timed attempt: the dispatcher now reserves ahead
	require.NoError(t, err)
	require.Equal(t, herald.StateSucceeded, waitFinished(c, "quick").State)
	_, err = remind(ctx, c, "slow", 0, time.Now()) // the one worker is busy with it
	require.NoError(t, err)
	rcv.waitArrivals(t, smsText("slow", 0), 1)
	reserved = func() bool {
		n, err := c.Get(ctx, "reminder")
		return err == nil && n.State == herald.StateReserved
	}
	_, err = remind(ctx, c, "reminder", 0, time.Now())
	require.NoError(t, err)
	require.Eventually(t, reserved, 10*time.Second, time.Millisecond, "reserved ahead of the busy worker")
	return release, reserved
}

func testCancelOfAReminderReservedAhead(t *testing.T, move bool) {
	ctx := context.Background()
	_, ns, c := connect(t, nil)
	rcv := newReceiver(t)
	slow := &slowWakes{delay: 300 * time.Millisecond}
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(slow)
	release, _ := reserveAheadOfBusyWorker(t, rdb, ns, c, rcv)

	slow.armed.Store(true)
	n, err := c.Cancel(ctx, "reminder")
	require.NoError(t, err)
	require.Equal(t, herald.StateCancelled, n.State)
	want := herald.StateCancelled
	if move {
		res, err := remind(ctx, c, "reminder", 1, time.Now().Add(time.Hour), herald.Replace())
		require.NoError(t, err)
		require.Equal(t, herald.Replaced, res.Status)
		want = herald.StateScheduled
	}
	freeWorkerAfterCancel(t, rcv, release)
	n, err = c.Get(ctx, "reminder")
	require.NoError(t, err)
	require.Equal(t, want, n.State)
	if move {
		require.Empty(t, n.History, "the moved reminder's history")
		require.Empty(t, rcv.arrivals(smsText("reminder", 1)), "the moved reminder went out early")
	}
}

// TestCancelOfAReminderReservedAheadWhileTheSubscriptionIsDown: the
// dispatcher's subscription goes down between the reservation of a
// reminder ahead of its busy worker and the worker's start of it, and the
// reminder is cancelled meanwhile, its announcement published to no one:
// Redis restarts (with its data), or drops the subscriber's connection,
// perhaps while the subscriber is slow to read a message (go-redis then
// reconnects where the reading does not see it fail). The worker, once
// free, sends nothing: it gives the reminder back, found cancelled, rather
// than start it unheard.
func TestCancelOfAReminderReservedAheadWhileTheSubscriptionIsDown(t *testing.T) {
	t.Parallel()
	dropSubscribers := func(t *testing.T, _ *redistest.Server, admin *redis.Client) {
		require.NoError(t, admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err())
	}
	for _, tc := range []struct {
		name string
		// slow is set when the dispatcher reads a message slowly.
		slow bool
		down func(t *testing.T, srv *redistest.Server, admin *redis.Client)
	}{
		{"RedisRestarts", false, func(t *testing.T, srv *redistest.Server, _ *redis.Client) {
			srv.Kill()
			require.NoError(t, srv.Restart())
		}},
		{"SubscriberDropped", false, dropSubscribers},
		{"SlowSubscriberDropped", true, dropSubscribers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := redistest.Start(t, redistest.Options{AOF: true}) // its own, to restart or drop subscribers of
			admin := srv.Client(t)
			ns := redistest.Namespace(t)
			c, err := herald.NewClient(admin, &herald.ClientConfig{Namespace: ns})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			rcv := newReceiver(t)
			slow := &slowWakes{delay: 300 * time.Millisecond}
			rdb := srv.Client(t)
			rdb.AddHook(slow)
			release, _ := reserveAheadOfBusyWorker(t, rdb, ns, c, rcv)

			if tc.slow {
				slow.armed.Store(true)
				require.NoError(t, admin.Publish(ctx, ns+":wake", "other 0 0").Err()) // read slowly
				time.Sleep(50 * time.Millisecond)
			}
			tc.down(t, srv, admin)
			var n *herald.Notification
			require.Eventually(t, func() bool {
				n, err = c.Cancel(ctx, "reminder")
				return err == nil
			}, 10*time.Second, 10*time.Millisecond, "the cancel once Redis answers")
			require.Equal(t, herald.StateCancelled, n.State)
			freeWorkerAfterCancel(t, rcv, release)
			requireCancelledUnattempted(t, c)
		})
	}
}

// freeWorkerAfterCancel frees the busy worker, the reminder's cancel
// answered, gives it a second, and fails t for every arrival of the
// cancelled reminder.
func freeWorkerAfterCancel(t *testing.T, rcv *receiver, release chan struct{}) {
	t.Helper()
	answered := time.Now()
	close(release)
	time.Sleep(time.Second)
	for _, a := range rcv.arrivals(smsText("reminder", 0)) {
		t.Errorf("the cancelled reminder reached the gateway at %s, %s after it was answered",
			a.at.Format(time.RFC3339Nano), a.at.Sub(answered))
	}
}

// TestCancelOfAReminderReservedAheadOnCluster: on a Redis Cluster, where
// the cancel runs on the node of the reminder's shard and its announcement
// reaches the dispatcher's subscription over the cluster bus, a reminder
// reserved ahead of a busy worker and cancelled is not sent once the
// worker is free.
func TestCancelOfAReminderReservedAheadOnCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	ns := redistest.Namespace(t)
	c, err := herald.NewClient(cl.Client(t), &herald.ClientConfig{Namespace: ns})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	rcv := newReceiver(t)
	release, _ := reserveAheadOfBusyWorker(t, cl.Client(t), ns, c, rcv)
	n, err := c.Cancel(ctx, "reminder")
	require.NoError(t, err)
	require.Equal(t, herald.StateCancelled, n.State)
	freeWorkerAfterCancel(t, rcv, release)
	requireCancelledUnattempted(t, c)
}

// requireCancelledUnattempted fails t unless the reminder is cancelled,
// with no attempt in its history.
func requireCancelledUnattempted(t *testing.T, c *herald.Client) {
	t.Helper()
	n, err := c.Get(context.Background(), "reminder")
	require.NoError(t, err)
	require.Equal(t, herald.StateCancelled, n.State)
	require.Empty(t, n.History)
}
