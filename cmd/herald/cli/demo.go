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

// demo wires Herald as serve does, on an embedded Redis whatever the file
// says, around the demo's receivers, and runs the demo's story.
func (c *app) demo(cmd *cobra.Command, speed float64) error {
	ctx := cmd.Context()
	cfg := c.base.Config
	set, err := loadPolicies(cfg.PoliciesFile)
	if err != nil {
		return err
	}
	d, err := demo.Start(&demo.Config{Out: c.base.Out, Policies: set, Speed: speed})
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

	fmt.Fprintf(c.base.Out, `Herald demo: four notifications on %s's policies, shortened to seconds.
Redis is embedded in this process: nothing survives exit. The SMS gateway, the
merchant and the payment provider are fakes on %s. Attempts are
numbered from 0, as in herald status and the Herald-Attempt header.

`, cfg.PoliciesFile, d.URL())
	return d.Run(ctx, cl, disp.Stop)
}
