// Package demo is the world `herald demo` runs in: fake receivers on one
// loopback HTTP server (an SMS gateway, a merchant, a payment provider), the
// demo's four notifications, and a timeline that prints every attempt as it
// happens, then a summary.
//
// The command wires Herald as serve does (store, senders, dispatcher,
// client) around a Demo: Start the receivers, point the SMS sender at
// SMSURL, run the dispatcher on Policies with Timeline as its observer, and
// Run the story through the client.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/show"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// TimeoutDefault bounds a Run, so that the demo ends within a minute
// whatever happens.
const TimeoutDefault = 50 * time.Second

// The demo's notifications.
const (
	reminderID = "demo-reminder-42"
	orderID    = "demo-order-1001"
	pollID     = "demo-poll-1001"
	brokenID   = "demo-order-1002"
	phone      = "+14155550100"
	// reminderDelay stands in for "30 minutes before the appointment".
	reminderDelay = 3 * time.Second
)

// ids are the demo's notifications in the order they are enqueued.
var ids = []string{reminderID, orderID, pollID, brokenID}

// Topics are the topics the demo enqueues to, in the order of its
// notifications; the policies file must have them all, payment-poll with a
// poll section.
var Topics = []string{"appointment-reminder", "order-notify", "payment-poll", "merchant-notify"}

// ErrTopics is returned, followed by the topic's name, by Start when the
// policies lack one of Topics; it reads after the policies file's name.
var ErrTopics = errors.New("has no topic")

// Config configures a Demo.
type Config struct {
	// Out receives the timeline and the summary. Required.
	Out io.Writer
	// Policies are the policies file's, with Topics. Required.
	Policies *policy.Set
	// Speed plays the schedules this many times faster. Default 1.
	Speed float64
	// Timeout bounds Run. Default TimeoutDefault.
	Timeout time.Duration
}

// Demo is one run of the demo: its receivers, what it built and what it saw.
type Demo struct {
	cfg   Config
	world *world
	tl    *timeline
	set   *policy.Set
	// records are the notifications as last read.
	records map[string]*notify.Notification
	// deadAfter is how many attempts the broken endpoint's notification
	// had made when it died, 0 until then.
	deadAfter int
}

// Start checks the policies and starts the receivers on 127.0.0.1, the only
// network the demo's SSRF guard needs to let through. Close it when done.
func Start(cfg *Config) (*Demo, error) {
	c := *cfg
	if c.Speed <= 0 {
		c.Speed = 1
	}
	if c.Timeout <= 0 {
		c.Timeout = TimeoutDefault
	}
	for _, name := range Topics {
		if t, ok := c.Policies.Topics[name]; !ok || (name == "payment-poll" && t.Poll == nil) {
			return nil, fmt.Errorf("%w %s", ErrTopics, name)
		}
	}
	d := &Demo{cfg: c, records: map[string]*notify.Notification{}}
	d.tl = &timeline{out: c.Out, start: time.Now()}
	w, err := startWorld(d.tl)
	if err != nil {
		return nil, err
	}
	d.world, d.tl.showFunc = w, w.show
	if d.set, err = d.policies(); err != nil {
		w.close()
		return nil, err
	}
	d.tl.policies = d.set
	return d, nil
}

// Close stops the receivers.
func (d *Demo) Close() { d.world.close() }

// URL is the receivers' base URL, http://127.0.0.1:port.
func (d *Demo) URL() string { return d.world.url }

// SMSURL is where the SMS sender (the http provider) posts.
func (d *Demo) SMSURL() string { return d.world.url + smsPath }

// Policies returns the demo's policies: the file's, with payment-poll's
// on_done pointed at the demo's merchant and every wait divided by Speed.
func (d *Demo) Policies() *policy.Set { return d.set }

// Timeline is the dispatcher's observer: it prints each attempt.
func (d *Demo) Timeline() schedule.Observer { return d.tl }

func (d *Demo) policies() (*policy.Set, error) {
	set := d.cfg.Policies
	policies := maps.Clone(set.Policies)
	for name, p := range policies {
		backoff := make([]notify.Duration, len(p.Backoff))
		for i, w := range p.Backoff {
			backoff[i] = notify.Duration(float64(w) / d.cfg.Speed)
		}
		p.Backoff = backoff
		policies[name] = p
	}
	topics := maps.Clone(set.Topics)
	t := topics["payment-poll"]
	done := *t.Poll
	done.OnDone = d.world.url + resultPath
	t.Poll = &done
	topics["payment-poll"] = t
	return policy.NewSet(policies, topics)
}

// Run enqueues the demo's notifications through cl, prints the timeline
// until all are delivered (replaying the broken endpoint's once it is
// dead), then a summary. It fails when one ends otherwise or the demo runs
// out of time. stopDispatcher is called before the summary: the store shows
// an outcome a moment before the dispatcher reports it to the timeline, and
// stopping it puts its last lines before the summary rather than into it.
func (d *Demo) Run(ctx context.Context, cl *client.Client, stopDispatcher func()) error {
	if err := d.enqueue(ctx, cl); err != nil {
		return err
	}
	err := d.wait(ctx, cl)
	stopDispatcher()
	fmt.Fprintln(d.cfg.Out)
	if perr := d.summary(); perr != nil {
		return perr
	}
	return err
}

// enqueue enqueues the demo's notifications, as the API would, and prints
// when each is due.
func (d *Demo) enqueue(ctx context.Context, cl *client.Client) error {
	delay := notify.Duration(float64(reminderDelay) / d.cfg.Speed)
	appointment, _ := json.Marshal(time.Now().Add(30 * time.Minute).Format(time.RFC3339))
	url := d.world.url
	reqs := []*notify.Request{
		{ID: reminderID, Topic: "appointment-reminder", Target: phone, Delay: &delay,
			Payload: json.RawMessage(`{"name":"Ada","with":"Dr. Lee","starts_at":` + string(appointment) + `}`)},
		{ID: orderID, Topic: "order-notify", Target: url + notifyPath,
			Payload: json.RawMessage(`{"out_trade_no":"1001","trade_no":"2026112200001","trade_status":"TRADE_SUCCESS","total_amount":"9.90"}`)},
		{ID: pollID, Topic: "payment-poll", Target: url + queryPath + "?out_trade_no=1001"},
		{ID: brokenID, Topic: "merchant-notify", Target: url + brokenPath,
			Payload: json.RawMessage(`{"payment_id":"1002","status":"paid","amount":"25.00","currency":"EUR"}`)},
	}
	results, err := cl.EnqueueBatch(ctx, reqs)
	if err != nil {
		return fmt.Errorf("demo: enqueue: %w", err)
	}
	for _, res := range results {
		if res.Err != nil {
			return fmt.Errorf("demo: enqueue: %w", res.Err)
		}
		n := res.Notification
		waits := make([]string, len(n.Backoff))
		for i, w := range n.Backoff {
			waits[i] = show.Duration(w)
		}
		d.tl.line(time.Now(), "enqueued %-16s topic %s, policy %s: waits %s; attempt 0 due at %s",
			n.ID, n.Topic, n.Policy, strings.Join(waits, ","), d.tl.stamp(*n.NextAttemptAt))
	}
	return nil
}

// wait follows the notifications until all succeeded.
func (d *Demo) wait(ctx context.Context, cl *client.Client) error {
	deadline := time.NewTimer(d.cfg.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, id := range ids {
			n, err := cl.Get(ctx, id)
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			d.records[id] = n
		}
		if broken := d.records[brokenID]; broken.State == notify.StateDead && d.deadAfter == 0 {
			d.deadAfter = broken.Attempts
			d.world.fix()
			d.tl.line(time.Now(), "%s is dead after %d attempts. The merchant fixes the endpoint, and the operator replays the dead letter (herald dlq replay --ids %s): one more attempt, due now",
				brokenID, broken.Attempts, brokenID)
			if _, _, err := cl.Replay(ctx, store.DeadFilter{IDs: []string{brokenID}}, store.DeadOptions{}); err != nil {
				return fmt.Errorf("demo: replay: %w", err)
			}
			continue
		}
		done := len(d.world.snapshot().results) > 0
		for id, n := range d.records {
			switch {
			case n.State == notify.StateSucceeded:
			case n.State.Finished() && (id != brokenID || d.deadAfter > 0):
				return fmt.Errorf("demo: %s ended %s, not as the demo expected", id, n.State)
			default:
				done = false
			}
		}
		if done {
			d.tl.line(time.Now(), "all four notifications delivered")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: %w", ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("demo: not finished after %s", d.cfg.Timeout)
		case <-tick.C:
		}
	}
}

// summary prints a table of the notifications as last read and what the
// receivers saw.
func (d *Demo) summary() error {
	seen := d.world.snapshot()
	stories := map[string]string{
		reminderID: fmt.Sprintf("the SMS gateway accepted %d text to %s", len(seen.texts), phone),
		orderID:    "the merchant answered " + strings.Join(seen.notifyAnswers, ", then "),
		pollID: fmt.Sprintf("the provider answered %s; on_done webhook to the merchant: %s",
			strings.Join(seen.trades, ", "), show.Dash(strings.Join(seen.results, ", "))),
		brokenID: fmt.Sprintf("503 on every attempt, %d requests", seen.brokenCalls),
	}
	if d.deadAfter > 0 {
		outcome := string(d.records[brokenID].State)
		if outcome == string(notify.StateSucceeded) {
			outcome = "delivered"
		}
		stories[brokenID] = fmt.Sprintf("dead after %d attempts (503), replayed, then %s", d.deadAfter, outcome)
	}
	out := d.cfg.Out
	fmt.Fprintf(out, "Summary after %.1fs:\n", time.Since(d.tl.start).Seconds())
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NOTIFICATION\tTOPIC\tCHANNEL\tSTATE\tATTEMPTS\tWHAT HAPPENED")
	for _, id := range ids {
		if n := d.records[id]; n != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", n.ID, n.Topic, n.Channel, n.State, n.Attempts, stories[id])
		}
	}
	return tw.Flush()
}
