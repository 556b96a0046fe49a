package poll

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/httpsend/httpsendtest"
	"github.com/heraldhq/herald/policy"
)

// TestShippedPaymentPollReadsAlipay: the shipped policies' payment-poll
// topic, whose comment names Alipay's statuses, ends a poll on Alipay's
// own answer, which nests trade_status in alipay_trade_query_response,
// instead of polling a paid trade until it is dead.
func TestShippedPaymentPollReadsAlipay(t *testing.T) {
	t.Parallel()

	set, err := policy.Load("../../configs/policies.yaml")
	require.NoError(t, err)
	alipay := httpsendtest.NewReceiver(t, "tcp4", httpsendtest.Answer(200, tradeAnswer("TRADE_SUCCESS"), "Content-Type", "application/json"))
	sender, err := New(&Config{Common: httpsend.Common{Rules: set.Rules, HTTP: httpsend.Config{
		AllowNetworks: []string{"127.0.0.0/8"},
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
	}}})
	require.NoError(t, err)

	_, err = sender.Send(context.Background(), &notify.Notification{ID: "poll-T-1", Topic: "payment-poll",
		Channel: notify.ChannelPoll, Target: alipay.URL() + "/gateway.do?method=alipay.trade.query"})
	require.NoError(t, err, "a paid trade's poll is done")
}
