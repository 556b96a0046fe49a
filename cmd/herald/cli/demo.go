package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/sms"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// DemoConfigFile is the configuration demo reads when --config is not
// given: an embedded Redis, a guard that lets loopback receivers through,
// and the policies shortened to seconds.
const DemoConfigFile = "configs/demo.yaml"

// demoTimeout bounds the demo, so that it ends within a minute whatever
// happens.
const demoTimeout = 50 * time.Second

// The demo's notifications, and the topics of the demo policies they use.
const (
	demoReminderID = "demo-reminder-42"
	demoOrderID    = "demo-order-1001"
	demoPollID     = "demo-poll-1001"
	demoBrokenID   = "demo-order-1002"
	demoPhone      = "+14155550100"
	// demoReminderDelay stands in for "30 minutes before the appointment".
	demoReminderDelay = 3 * time.Second
)

// demoTopics are the topics the demo enqueues to, in the order of its
// notifications.
var demoTopics = []string{"appointment-reminder", "order-notify", "payment-poll", "merchant-notify"}

func (c *app) demoCommand() *cobra.Command {
	var speed float64
	cmd := withConfigFile(&cobra.Command{
		Use:   "demo",
		Short: "Watch Herald deliver, retry, give up and replay, in about 15 seconds",
		Long: `Demo runs Herald on this machine with nothing else: an embedded Redis, fake
receivers on 127.0.0.1 (the only network its SSRF guard lets through), and a
dispatcher, on configs/demo-policies.yaml (the shipped policies with hours
shortened to seconds). It enqueues four notifications and prints every
attempt as it happens, then a summary:

  - an appointment reminder SMS, rendered from its template and sent through
    a fake SMS gateway (the http provider);
  - a merchant's payment notification, Alipay-style: the merchant fails
    twice, then answers "success";
  - a poll of a payment provider's trade query, which reports TRADE_SUCCESS
    on the third poll, followed by the on_done webhook to the merchant;
  - a webhook to an endpoint that answers 503 until the notification is
    dead; the merchant then fixes it, and the dead letter is replayed.

It exits 0 when all went as described, within a minute in any case. Run it
from the repository root (make demo): it reads configs/demo.yaml unless
--config names another file.`,
		Example: "  make demo\n  go run ./cmd/herald demo --speed 2",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if speed <= 0 || speed > 100 {
				return &UsageError{Err: fmt.Errorf("--speed must be above 0 and at most 100, not %g", speed)}
			}
			return c.demo(cmd, speed)
		},
	}, DemoConfigFile)
	cmd.Flags().Float64Var(&speed, "speed", 1, "play the schedules this many times faster")
	return cmd
}

// demoRun is one run of the demo: what it built and what it saw.
type demoRun struct {
	cl    *client.Client
	world *demoWorld
	tl    *timeline
	set   *policy.Set
	// records are the notifications as last read.
	records map[string]*notify.Notification
	// deadAfter is how many attempts the broken endpoint's notification
	// had made when it died, 0 until then.
	deadAfter int
}

func (c *app) demo(cmd *cobra.Command, speed float64) error {
	ctx := cmd.Context()
	r := &demoRun{tl: &timeline{out: c.base.Out, start: time.Now()}, records: map[string]*notify.Notification{}}
	world, err := startDemoWorld(r.tl)
	if err != nil {
		return err
	}
	defer world.close()
	r.world, r.tl.showFunc = world, world.show

	cfg := c.base.Config
	cfg.Redis = RedisConfig{Mode: RedisModeStandalone} // no address: embedded, whatever the file says
	cfg.Senders.Webhook.AllowNetworks = []string{"127.0.0.0/8"}
	cfg.Senders.SMS = SMSConfig{Provider: sms.ProviderHTTP, URL: world.url + demoSMSPath}
	w, err := c.base.wire(cmd, true)
	if err != nil {
		return err
	}
	defer w.Close()
	if r.set, err = demoPolicies(w, world.url+demoResultPath, speed); err != nil {
		return err
	}
	r.tl.policies = r.set
	policies := func() *policy.Set { return r.set }
	tmpl, err := w.loadTemplates()
	if err != nil {
		return err
	}
	senders, err := w.newSenders(policies, tmpl)
	if err != nil {
		return err
	}
	d, err := w.newDispatcher(senders, policies, r.tl)
	if err != nil {
		return err
	}
	if r.cl, err = w.newClient(policies); err != nil {
		return err
	}
	defer r.cl.Close()
	if err := d.Start(ctx); err != nil {
		return err
	}
	defer d.Stop()

	fmt.Fprintf(c.base.Out, `Herald demo: four notifications on %s's policies, shortened to seconds.
Redis is embedded in this process: nothing survives exit. The SMS gateway, the
merchant and the payment provider are fakes on %s. Attempts are
numbered from 0, as in herald status and the Herald-Attempt header.

`, cfg.PoliciesFile, world.url)
	if err := r.enqueue(cmd, speed); err != nil {
		return err
	}
	err = r.wait(cmd)
	fmt.Fprintln(c.base.Out)
	if perr := r.summary(c.base.Out); perr != nil {
		return perr
	}
	return err
}

// demoPolicies loads the policies file, checks that it has the demo's
// topics, points payment-poll's on_done at the demo's merchant and divides
// every wait by speed.
func demoPolicies(w *wiring, onDone string, speed float64) (*policy.Set, error) {
	set, err := w.loadPolicies()
	if err != nil {
		return nil, err
	}
	for _, name := range demoTopics {
		if t, ok := set.Topics[name]; !ok || (name == "payment-poll" && t.Poll == nil) {
			return nil, &UsageError{Err: fmt.Errorf("%s has no topic %s as herald demo needs it; run the demo from the repository root (make demo), where it reads %s",
				w.cfg.PoliciesFile, name, DemoConfigFile)}
		}
	}
	policies := maps.Clone(set.Policies)
	for name, p := range policies {
		backoff := make([]notify.Duration, len(p.Backoff))
		for i, d := range p.Backoff {
			backoff[i] = notify.Duration(float64(d) / speed)
		}
		p.Backoff = backoff
		policies[name] = p
	}
	topics := maps.Clone(set.Topics)
	t := topics["payment-poll"]
	done := *t.Poll
	done.OnDone = onDone
	t.Poll = &done
	topics["payment-poll"] = t
	return policy.NewSet(policies, topics)
}

// enqueue enqueues the demo's notifications through the Go client, as the
// API would, and prints when each is due.
func (r *demoRun) enqueue(cmd *cobra.Command, speed float64) error {
	delay := notify.Duration(float64(demoReminderDelay) / speed)
	appointment, _ := json.Marshal(time.Now().Add(30 * time.Minute).Format(time.RFC3339))
	reqs := []*notify.Request{
		{ID: demoReminderID, Topic: "appointment-reminder", Target: demoPhone, Delay: &delay,
			Payload: json.RawMessage(`{"name":"Ada","with":"Dr. Lee","starts_at":` + string(appointment) + `}`)},
		{ID: demoOrderID, Topic: "order-notify", Target: r.world.url + demoNotifyPath,
			Payload: json.RawMessage(`{"out_trade_no":"1001","trade_no":"2026112200001","trade_status":"TRADE_SUCCESS","total_amount":"9.90"}`)},
		{ID: demoPollID, Topic: "payment-poll", Target: r.world.url + demoQueryPath + "?out_trade_no=1001"},
		{ID: demoBrokenID, Topic: "merchant-notify", Target: r.world.url + demoBrokenPath,
			Payload: json.RawMessage(`{"payment_id":"1002","status":"paid","amount":"25.00","currency":"EUR"}`)},
	}
	results, err := r.cl.EnqueueBatch(cmd.Context(), reqs)
	if err != nil {
		return fmt.Errorf("demo: enqueue: %w", err)
	}
	for _, res := range results {
		if res.Err != nil {
			return fmt.Errorf("demo: enqueue: %w", res.Err)
		}
		n := res.Notification
		waits := make([]string, len(n.Backoff))
		for i, d := range n.Backoff {
			waits[i] = shortDuration(d)
		}
		r.tl.line(time.Now(), "enqueued %-16s topic %s, policy %s: waits %s; attempt 0 due at %s",
			n.ID, n.Topic, n.Policy, strings.Join(waits, ","), r.tl.stamp(*n.NextAttemptAt))
	}
	return nil
}

// wait follows the notifications until all succeeded, replaying the broken
// endpoint's once it is dead, and fails when one ends otherwise or the
// demo runs out of time.
func (r *demoRun) wait(cmd *cobra.Command) error {
	ctx := cmd.Context()
	deadline := time.NewTimer(demoTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, id := range []string{demoReminderID, demoOrderID, demoPollID, demoBrokenID} {
			n, err := r.cl.Get(ctx, id)
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			r.records[id] = n
		}
		if broken := r.records[demoBrokenID]; broken.State == notify.StateDead && r.deadAfter == 0 {
			r.deadAfter = broken.Attempts
			r.world.fix()
			r.tl.line(time.Now(), "%s is dead after %d attempts. The merchant fixes the endpoint, and the operator replays the dead letter (herald dlq replay --ids %s): one more attempt, due now",
				demoBrokenID, broken.Attempts, demoBrokenID)
			if _, _, err := r.cl.Replay(ctx, store.DeadFilter{IDs: []string{demoBrokenID}}, store.DeadOptions{}); err != nil {
				return fmt.Errorf("demo: replay: %w", err)
			}
			continue
		}
		done := len(r.world.snapshot().results) > 0
		for id, n := range r.records {
			switch {
			case n.State == notify.StateSucceeded:
			case n.State.Finished() && (id != demoBrokenID || r.deadAfter > 0):
				return fmt.Errorf("demo: %s ended %s, not as the demo expected", id, n.State)
			default:
				done = false
			}
		}
		if done {
			r.tl.line(time.Now(), "all four notifications delivered")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: %w", ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("demo: not finished after %s", demoTimeout)
		case <-tick.C:
		}
	}
}

// summary prints a table of the notifications as last read and what the
// receivers saw.
func (r *demoRun) summary(out io.Writer) error {
	world := r.world.snapshot()
	stories := map[string]string{
		demoReminderID: fmt.Sprintf("the SMS gateway accepted %d text to %s", len(world.texts), demoPhone),
		demoOrderID:    "the merchant answered " + strings.Join(world.notifyAnswers, ", then "),
		demoPollID: fmt.Sprintf("the provider answered %s; on_done webhook to the merchant: %s",
			strings.Join(world.trades, ", "), dash(strings.Join(world.results, ", "))),
		demoBrokenID: fmt.Sprintf("503 on every attempt, %d requests", world.brokenCalls),
	}
	if r.deadAfter > 0 {
		outcome := string(r.records[demoBrokenID].State)
		if outcome == string(notify.StateSucceeded) {
			outcome = "delivered"
		}
		stories[demoBrokenID] = fmt.Sprintf("dead after %d attempts (503), replayed, then %s", r.deadAfter, outcome)
	}
	fmt.Fprintf(out, "Summary after %.1fs:\n", time.Since(r.tl.start).Seconds())
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NOTIFICATION\tTOPIC\tCHANNEL\tSTATE\tATTEMPTS\tWHAT HAPPENED")
	for _, id := range []string{demoReminderID, demoOrderID, demoPollID, demoBrokenID} {
		n := r.records[id]
		if n == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", n.ID, n.Topic, n.Channel, n.State, n.Attempts, stories[id])
	}
	return tw.Flush()
}
