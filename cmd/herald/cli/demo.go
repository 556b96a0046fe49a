package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/heraldhq/herald/cmd/herald/config"
	"github.com/heraldhq/herald/demo"
	"github.com/heraldhq/herald/notify/sms"
)

// DemoConfigFile is the configuration demo reads when --config is not
// given: an embedded Redis, a guard that lets loopback receivers through,
// and the policies shortened to seconds.
const DemoConfigFile = "configs/demo.yaml"

func (c *app) demoCommand() *cobra.Command {
	var speed float64
	cmd := withConfigFile(&cobra.Command{
		Use:   "demo",
		Short: "Watch Herald deliver, retry, give up and replay, in about 10 seconds",
		Long: `Demo runs Herald on this machine with nothing else: an embedded Redis, fake
receivers on 127.0.0.1 (the only network its SSRF guard lets through), a
pull worker and a dispatcher, on configs/demo-policies.yaml (the shipped
policies with hours shortened to seconds). It enqueues six notifications
and prints every attempt as it happens, then a summary:

  - two appointment reminder SMS: one appointment moves, so its reminder is
    enqueued again with replace and goes out later, rendered from its
    template through a fake SMS gateway (the http provider); the other
    appointment is cancelled, and its reminder never goes out;
  - a merchant's payment notification, Alipay-style: the merchant checks
    each request's Standard Webhooks signature, fails twice, then answers
    "success";
  - a poll of a payment provider's trade query, which reports TRADE_SUCCESS
    on the third poll, followed by the on_done webhook to the merchant;
  - a webhook to an endpoint that answers 503 until the notification is
    dead; the merchant then fixes it, and the dead letter is replayed;
  - a job on the pull topic jobs, which the worker reserves, fails (a nack)
    and, on the retry, acknowledges.

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

// demo wires Herald as serve does, on an embedded Redis whatever the file
// says, around the demo's receivers, and runs the demo's story.
func (c *app) demo(cmd *cobra.Command, speed float64) error {
	ctx := cmd.Context()
	cfg := c.base.Config
	set, err := c.base.loadConfigPolicies()
	if err != nil {
		return err
	}
	d, err := demo.Start(&demo.Config{Out: c.base.Out, Policies: set, Speed: speed, Secret: string(cfg.Senders.Webhook.Secret)})
	if errors.Is(err, demo.ErrTopics) {
		return &UsageError{Err: fmt.Errorf("%s %w, which herald demo needs; run the demo from the repository root (make demo), where it reads %s",
			cfg.PoliciesFile, err, DemoConfigFile)}
	} else if err != nil {
		return err
	}
	defer d.Close()

	cfg.Redis = config.RedisConfig{Mode: config.RedisModeStandalone}
	cfg.Senders.Webhook.AllowNetworks = []string{"127.0.0.0/8"}
	cfg.Senders.SMS = config.SMSConfig{Provider: sms.ProviderHTTP, URL: d.SMSURL()}
	w, err := c.base.wire(cmd, true)
	if err != nil {
		return err
	}
	defer w.Close()
	policies := d.Policies
	disp, err := w.newDispatcher(policies, d.Timeline())
	if err != nil {
		return err
	}
	cl, err := w.newClient(policies)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := disp.Start(ctx); err != nil {
		return err
	}
	defer disp.Stop()

	fmt.Fprintf(c.base.Out, `Herald demo: six notifications on %s's policies, shortened to seconds.
Redis is embedded in this process: nothing survives exit. The SMS gateway, the
merchant and the payment provider are fakes on %s; the merchant
checks webhook signatures (senders.webhook.secret). The pull worker runs in
this process. Attempts are numbered from 0, as in herald status and the
Herald-Attempt header.

`, cfg.PoliciesFile, d.URL())
	return d.Run(ctx, cl, disp.Stop)
}
