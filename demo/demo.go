// Package demo is the world `herald demo` runs in: fake receivers on one
// loopback HTTP server (an SMS gateway, a merchant that checks webhook
// signatures, a payment provider), a pull worker, the demo's six
// notifications, and a timeline that prints every attempt as it happens,
// then a summary.
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
	reminderID  = "demo-reminder-42"
	cancelledID = "demo-reminder-43"
	orderID     = "demo-order-1001"
	pollID      = "demo-poll-1001"
	brokenID    = "demo-order-1002"
	jobID       = "demo-invoice-42"
	phone       = "+14155550100"
	// cancelledPhone is the patient whose appointment is cancelled.
	cancelledPhone = "+14155550143"
	// reminderDelay stands in for "30 minutes before the appointment", and
	// so for 30 minutes: appointment 42 moves this much later.
	reminderDelay = 3 * time.Second
	// changeTime is the least time, not divided by Speed, between enqueueing
	// the reminders and their being due: the appointment service moves one
	// and cancels the other in that time, which is the machine's, not the
	// schedule's. At --speed 4 a loaded machine took 0.8s to enqueue, and
	// the reminder of the cancelled appointment went out first.
	changeTime = 3 * time.Second
	// jobsTopic is the pull worker's topic.
	jobsTopic = "jobs"
)

// ids are the demo's notifications in the order they are enqueued.
var ids = []string{reminderID, cancelledID, orderID, pollID, brokenID, jobID}

// Topics are the topics the demo enqueues to, in the order of its
// notifications; the policies file must have them all, payment-poll with a
// poll section and jobs on the pull channel.
var Topics = []string{"appointment-reminder", "order-notify", "payment-poll", "merchant-notify", jobsTopic}

// ErrTopics is returned, followed by the topic's name, by Start when the
// policies lack one of Topics; it reads after the policies file's name.
var ErrTopics = errors.New("has no topic")

// Config configures a Demo.
type Config struct {
	// Out receives the timeline and the summary. Required.
	Out io.Writer
	// Secret is the webhook signing secret (senders.webhook.secret), with
	// which the merchant checks each payment notification's signature, as
	// a receiver would. Empty: the merchant notes that they are unsigned.
	Secret string
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
	// worked is the pull worker's answers, in order; Run reads it once the
	// worker has returned.
	worked []string
	// moved is set once the appointment service moved its reminder.
	moved bool
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
		t, ok := c.Policies.Topics[name]
		if !ok || (name == "payment-poll" && t.Poll == nil) || (name == jobsTopic && t.Channel != notify.ChannelPull) {
			return nil, fmt.Errorf("%w %s", ErrTopics, name)
		}
	}
	d := &Demo{cfg: c, records: map[string]*notify.Notification{}}
	d.tl = &timeline{out: c.Out, start: time.Now()}
	w, err := startWorld(d.tl, c.Secret)
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

// Run enqueues the demo's notifications through cl and runs the pull
// worker, prints the timeline until all are delivered (moving one reminder
// and cancelling the other, replaying the broken endpoint's notification
// once it is dead), then a summary. It fails when one ends otherwise or the
// demo runs out of time. stopDispatcher is called before the summary: the
// store shows an outcome a moment before the dispatcher reports it to the
// timeline, and stopping it puts its last lines before the summary rather
// than into it.
func (d *Demo) Run(ctx context.Context, cl *client.Client, stopDispatcher func()) error {
	err := d.play(ctx, cl)
	if ctx.Err() != nil {
		// Say what stopped the demo (Ctrl-C: "interrupt signal received"),
		// not that a context was cancelled.
		err = fmt.Errorf("demo: stopped before the end: %w", context.Cause(ctx))
	}
	stopDispatcher()
	fmt.Fprintln(d.cfg.Out)
	if perr := d.summary(); perr != nil {
		return perr
	}
	return err
}

// play enqueues the notifications, changes the appointments, and follows
// the notifications, with the pull worker running, until the story ends.
func (d *Demo) play(ctx context.Context, cl *client.Client) error {
	if err := d.enqueue(ctx, cl); err != nil {
		return err
	}
	if err := d.change(ctx, cl); err != nil {
		return err
	}
	workCtx, stopWork := context.WithCancel(ctx)
	worked := make(chan struct{})
	go func() {
		defer close(worked)
		d.work(workCtx, cl)
	}()
	defer func() {
		stopWork()
		<-worked
	}()
	return d.wait(ctx, cl)
}

// enqueue enqueues the demo's notifications, as the API would, and prints
// when each is due.
func (d *Demo) enqueue(ctx context.Context, cl *client.Client) error {
	delay := notify.Duration(max(time.Duration(float64(reminderDelay)/d.cfg.Speed), changeTime))
	url := d.world.url
	reqs := []*notify.Request{
		{ID: reminderID, Topic: "appointment-reminder", Target: phone, Delay: &delay,
			Payload: appointment("Ada", 30*time.Minute)},
		{ID: cancelledID, Topic: "appointment-reminder", Target: cancelledPhone, Delay: &delay,
			Payload: appointment("Grace", 30*time.Minute)},
		{ID: orderID, Topic: "order-notify", Target: url + notifyPath,
			Payload: json.RawMessage(`{"out_trade_no":"1001","trade_no":"2026112200001","trade_status":"TRADE_SUCCESS","total_amount":"9.90"}`)},
		{ID: pollID, Topic: "payment-poll", Target: url + queryPath + "?out_trade_no=1001"},
		{ID: brokenID, Topic: "merchant-notify", Target: url + brokenPath,
			Payload: json.RawMessage(`{"payment_id":"1002","status":"paid","amount":"25.00","currency":"EUR"}`)},
		{ID: jobID, Topic: jobsTopic, Payload: json.RawMessage(`{"invoice":42}`)},
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
		d.records[n.ID] = n
		d.tl.line("enqueued %-16s topic %s, policy %s: waits %s; attempt 0 due at %s",
			n.ID, n.Topic, n.Policy, show.Backoff(n.Backoff), d.tl.stamp(*n.NextAttemptAt))
	}
	return nil
}

// appointment is a reminder's payload: name's appointment with Dr. Lee,
// in from now.
func appointment(name string, in time.Duration) json.RawMessage {
	p, _ := json.Marshal(map[string]string{"name": name, "with": "Dr. Lee", "starts_at": time.Now().Add(in).Format(time.RFC3339)})
	return p
}

// change does what the appointment service does when appointments change,
// before the reminders are due: appointment 42 moves 30 minutes later, so
// its reminder is enqueued again with replace, due that much later;
// appointment 43 is cancelled, and its reminder with it.
func (d *Demo) change(ctx context.Context, cl *client.Client) error {
	sendAt := d.records[reminderID].NextAttemptAt.Add(time.Duration(float64(reminderDelay) / d.cfg.Speed))
	moved, _, err := cl.Enqueue(ctx, &notify.Request{ID: reminderID, Topic: "appointment-reminder", Target: phone,
		SendAt: &sendAt, Payload: appointment("Ada", 60*time.Minute), Replace: true})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.moved = true
	d.tl.line("%s moved: the appointment moves 30 minutes later, so the service enqueues the reminder again with replace; attempt 0 now due at %s",
		reminderID, d.tl.stamp(*moved.NextAttemptAt))
	if _, err := cl.Cancel(ctx, cancelledID); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.tl.line("%s cancelled: the appointment is cancelled, and its reminder with it (herald cancel %s)", cancelledID, cancelledID)
	return nil
}

// work is a pull worker on the jobs topic, as any program that reserves
// over the API would be: its first attempt fails (a nack), its second
// succeeds (an ack). It returns then, or when ctx ends.
func (d *Demo) work(ctx context.Context, cl *client.Client) {
	for ctx.Err() == nil {
		jobs, err := cl.Reserve(ctx, jobsTopic, 1, time.Second)
		if err != nil {
			if ctx.Err() == nil {
				d.tl.line("worker: reserve: %v", err)
			}
			return
		}
		for _, n := range jobs {
			a := notify.Attempt{Attempt: n.Attempts, StartedAt: time.Now(), Outcome: notify.OutcomeSuccess}
			var cause error
			if n.Attempts == 0 {
				cause = errors.New("PDF renderer down")
				a.Outcome, a.Error = notify.OutcomeRetry, "nack: "+cause.Error()
			}
			if cause != nil {
				err = cl.Nack(ctx, n.ID, n.Receipt, cause)
				d.worked = append(d.worked, fmt.Sprintf("nack %q", cause.Error()))
			} else {
				err = cl.Ack(ctx, n.ID, n.Receipt)
				d.worked = append(d.worked, "ack")
			}
			if err != nil {
				d.tl.line("worker: %s: %v", n.ID, err)
				return
			}
			a.FinishedAt = time.Now()
			if cause == nil {
				d.tl.AttemptFinished(n, a, notify.ActionAck, 0)
				return
			}
			d.tl.AttemptFinished(n, a, notify.ActionRetry, 0)
		}
	}
}

// wants is the state each notification should end in.
func wants(id string) notify.State {
	if id == cancelledID {
		return notify.StateCancelled
	}
	return notify.StateSucceeded
}

// wait follows the notifications until all are where the story ends.
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
			d.tl.line("%s is dead after %d attempts. The merchant fixes the endpoint, and the operator replays the dead letter (herald dlq replay --ids %s): one more attempt, due now",
				brokenID, broken.Attempts, brokenID)
			if _, _, err := cl.Replay(ctx, store.DeadFilter{IDs: []string{brokenID}}, store.DeadOptions{}); err != nil {
				return fmt.Errorf("demo: replay: %w", err)
			}
			continue
		}
		seen := d.world.snapshot()
		if seen.texts[cancelledPhone] > 0 {
			// Herald cancels a reminder whose attempt is under way, but the
			// text is gone: the story did not happen as told.
			return errors.New("demo: the reminder of the cancelled appointment went out before its cancel")
		}
		done := len(seen.results) > 0
		for id, n := range d.records {
			switch {
			case n.State == wants(id):
			case n.State.Finished() && (id != brokenID || d.deadAfter > 0):
				return fmt.Errorf("demo: %s ended %s, not as the demo expected", id, n.State)
			default:
				done = false
			}
		}
		if done {
			d.tl.line("all delivered, but for the reminder of the cancelled appointment")
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

// answers lists a receiver's answers in order, joined by sep, or says
// "nothing" when none came.
func answers(list []string, sep string) string {
	if len(list) == 0 {
		return "nothing"
	}
	return strings.Join(list, sep)
}

// summary prints a table of the notifications as last read and what the
// receivers saw.
func (d *Demo) summary() error {
	seen := d.world.snapshot()
	// An interrupted run has some of these still to happen.
	reminder := fmt.Sprintf("the SMS gateway accepted %s to %s", show.Count(seen.texts[phone], "text", "texts"), phone)
	if d.moved {
		reminder = "moved before it was due; " + reminder
	}
	cancelled := fmt.Sprintf("the SMS gateway accepted %s to %s", show.Count(seen.texts[cancelledPhone], "text", "texts"), cancelledPhone)
	if n := d.records[cancelledID]; n != nil && n.State == notify.StateCancelled {
		cancelled = "cancelled before it was due; " + cancelled
	}
	broken := "503 on every attempt, " + show.Count(seen.brokenCalls, "request", "requests")
	if seen.brokenCalls == 0 {
		broken = "no attempt yet"
	}
	stories := map[string]string{
		reminderID:  reminder,
		cancelledID: cancelled,
		orderID:     seen.signatures + "; the merchant answered " + answers(seen.notifyAnswers, ", then "),
		jobID:       "the pull worker answered " + answers(d.worked, ", then "),
		pollID: fmt.Sprintf("the provider answered %s; on_done webhook to the merchant: %s",
			answers(seen.trades, ", "), show.Dash(strings.Join(seen.results, ", "))),
		brokenID: broken,
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
