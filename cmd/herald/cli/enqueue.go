package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// enqueueOptions are enqueue's flags, the fields of POST /v1/notifications.
type enqueueOptions struct {
	id, topic, channel, target, endpoint, template, policy, orderKey string
	// payload is JSON, or @FILE to read it from a file.
	payload string
	// backoff is a comma-separated array of durations.
	backoff string
	// delay, sendAt and ttr are as the API takes them.
	delay, sendAt, ttr string
	// headers are NAME=VALUE pairs.
	headers []string
	replace bool
	asJSON  bool
}

// request checks the flags and turns them into a request. Every mistake is
// a *UsageError naming its flag; the rest of the validation, shared with
// the API, happens when the request is resolved.
func (o *enqueueOptions) request() (*notify.Request, error) {
	usage := func(flag, format string, args ...any) error {
		return &UsageError{Err: fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...))}
	}
	if o.topic == "" {
		return nil, usage("topic", "is required")
	}
	req := &notify.Request{
		ID: o.id, Topic: o.topic, Channel: o.channel, Target: o.target, Endpoint: o.endpoint,
		Template: o.template, Policy: o.policy, OrderKey: o.orderKey, Replace: o.replace,
	}
	if o.payload != "" {
		body := []byte(o.payload)
		if path, ok := strings.CutPrefix(o.payload, "@"); ok {
			var err error
			if body, err = os.ReadFile(path); err != nil {
				return nil, usage("payload", "%v", err)
			}
		}
		if !json.Valid(body) {
			return nil, usage("payload", "is not valid JSON (give JSON, or @FILE to read it from a file)")
		}
		req.Payload = body
	}
	if o.backoff != "" {
		for i, s := range strings.Split(o.backoff, ",") {
			d, err := notify.ParseDuration(s)
			if err != nil {
				return nil, usage("backoff", "item %d: %v", i, err)
			}
			req.Backoff = append(req.Backoff, notify.Duration(d))
		}
	}
	duration := func(flag, s string) (*notify.Duration, error) {
		if s == "" {
			return nil, nil
		}
		d, err := notify.ParseDuration(s)
		if err != nil {
			return nil, usage(flag, "%v", err)
		}
		nd := notify.Duration(d)
		return &nd, nil
	}
	var err error
	if req.Delay, err = duration("delay", o.delay); err != nil {
		return nil, err
	}
	if req.TTR, err = duration("ttr", o.ttr); err != nil {
		return nil, err
	}
	if o.sendAt != "" {
		t, err := time.Parse(time.RFC3339Nano, o.sendAt)
		if err != nil {
			return nil, usage("send-at", "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		req.SendAt = &t
	}
	for _, h := range o.headers {
		name, value, ok := strings.Cut(h, "=")
		switch {
		case ok && name == "":
			return nil, usage("header", "has no NAME before its =")
		case !ok:
			// Only the name: a header written as HTTP writes it
			// ("Authorization: Bearer ...") carries a value that may be a
			// token.
			if i := strings.IndexAny(h, ": "); i >= 0 {
				h = h[:i]
			}
			return nil, usage("header", "%q is not NAME=VALUE", h)
		}
		if req.Headers == nil {
			req.Headers = map[string]string{}
		}
		req.Headers[name] = value
	}
	return req, nil
}

// refuseEmpty refuses a string flag given an empty value, as a script's
// unset variable gives: enqueue would take it as left out, and quietly use
// the policy's or the topic's backoff, target or ttr.
func refuseEmpty(flags *pflag.FlagSet) error {
	var err error
	flags.Visit(func(f *pflag.Flag) {
		if err == nil && f.Value.Type() == "string" && f.Value.String() == "" {
			err = &UsageError{Err: fmt.Errorf("--%s: is empty; leave the flag out for the default", f.Name)}
		}
	})
	return err
}

func (c *app) enqueueCommand() *cobra.Command {
	o := &enqueueOptions{}
	cmd := withConfig(&cobra.Command{
		Use:   "enqueue --topic TOPIC [flags]",
		Short: "Enqueue a notification",
		Long: `Enqueue stores a notification in Redis, as POST /v1/notifications does: the
same validation, the topic's defaults (channel, policy, template, target or
endpoint from the policies file), then the policy's backoff array. The first
attempt is due at the send time (now, --delay after now, or --send-at) plus
backoff[0].

The id makes enqueueing idempotent: the same id with the same content returns
the stored record unchanged; with other content it fails (exit status 1)
unless --replace reschedules it from attempt 0. Without --id a random id is
chosen. Prints the stored record (--json: as the API answers).`,
		Example: `  herald enqueue --topic order-notify --id order-1001 \
    --target https://merchant.example/notify \
    --payload '{"out_trade_no":"1001","trade_status":"TRADE_SUCCESS","total_amount":"9.90"}'
  herald enqueue --topic appointment-reminder --target +14155550100 \
    --send-at 2026-03-01T09:30:00Z --payload @reminder.json
  herald enqueue --topic jobs --payload '{"invoice":42}' --backoff 0s,10s,1m --delay 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseEmpty(cmd.Flags()); err != nil {
				return err
			}
			req, err := o.request()
			if err != nil {
				return err
			}
			return c.withPolicies(cmd, clientLoads{policies: true, templates: req.Template != ""}, func(cl *client.Client, _ *policy.Set) error {
				n, status, err := cl.Enqueue(cmd.Context(), req)
				switch {
				case errors.Is(err, notify.ErrOtherShard):
					return fmt.Errorf("enqueue %s: %w", n.ID, err)
				case errors.Is(err, notify.ErrConflict):
					return fmt.Errorf("enqueue %s: %w", n.ID, &plainError{err: err,
						msg: "a notification with this id and other content exists; add --replace to reschedule it with this content"})
				case errors.Is(err, notify.ErrReserved):
					return fmt.Errorf("enqueue %s: %w: an attempt is running; replace it once that ends", n.ID, err)
				case errors.Is(err, notify.ErrOutOfMemory) && o.id != "":
					return fmt.Errorf("enqueue %s: %w", o.id, refusedFull(err))
				case err != nil:
					return named("enqueue", refusedFull(err))
				}
				return c.showRecord(o.asJSON, map[store.EnqueueStatus]string{
					store.Created: "enqueued", store.Existing: "already enqueued, unchanged:", store.Replaced: "replaced",
				}[status], n)
			})
		},
	})
	f := cmd.Flags()
	f.StringVar(&o.topic, "topic", "", "topic ([a-z0-9._-]); its entry in the policies file gives defaults (required)")
	f.StringVar(&o.id, "id", "", "idempotency key ([A-Za-z0-9._:-], up to 128); random when absent")
	f.StringVar(&o.channel, "channel", "", "webhook, sms, poll or pull (default: the topic's)")
	f.StringVar(&o.target, "target", "", "URL (webhook, poll) or E.164 number (sms); none for pull (default: the topic's)")
	f.StringVar(&o.endpoint, "endpoint", "", "registered endpoint to deliver to instead of --target (webhook; default: the topic's)")
	f.StringVar(&o.payload, "payload", "", "JSON payload, or @FILE to read it from a file")
	f.StringVar(&o.template, "template", "", "template in templates_dir, which is read to check that it holds it (default: the topic's)")
	f.StringVar(&o.policy, "policy", "", "policy name (default: the topic's, else default)")
	f.StringVar(&o.backoff, "backoff", "", "backoff array overriding the policy's, such as 0s,0s,2m,10m")
	f.StringVar(&o.delay, "delay", "", "send this long after now: a Go duration or seconds")
	f.StringVar(&o.sendAt, "send-at", "", "send at this RFC 3339 time")
	f.StringVar(&o.ttr, "ttr", "", "how long one attempt may hold its reservation (default: the policy's)")
	f.StringVar(&o.orderKey, "order-key", "", "attempt after every earlier notification of this topic with this key has ended")
	f.StringArrayVar(&o.headers, "header", nil, "NAME=VALUE header sent with each attempt; repeat for more")
	f.BoolVar(&o.replace, "replace", false, "reschedule an existing notification of this id with this content")
	f.BoolVar(&o.asJSON, "json", false, "print the record as JSON")
	return cmd
}
