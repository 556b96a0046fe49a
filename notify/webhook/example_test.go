package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/webhook"
)

func ExampleSender_Send() {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("received", r.Header.Get("webhook-id"), "attempt", r.Header.Get("Herald-Attempt"))
		fmt.Fprint(w, "success")
	}))
	defer receiver.Close()

	sender, err := webhook.New(&webhook.Config{
		Secret: "whsec_c2VjcmV0",
		// The receiver is on this machine, which the SSRF guard refuses
		// unless told otherwise.
		Common: httpsend.Common{HTTP: httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}}},
	})
	if err != nil {
		panic(err)
	}
	resp, err := sender.Send(context.Background(), &notify.Notification{
		ID:      "ord-1001",
		Topic:   "order-notify",
		Target:  receiver.URL,
		Payload: json.RawMessage(`{"out_trade_no":"T-1","trade_status":"TRADE_SUCCESS"}`),
	})
	fmt.Println(resp.StatusCode, resp.Body, err)
	// Output:
	// received ord-1001 attempt 0
	// 200 success <nil>
}
