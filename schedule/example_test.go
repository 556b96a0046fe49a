package schedule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// A Go service runs the dispatcher in-process and handles a topic itself:
// notifications on channel pull for topic "invoices" go to the handler, with
// the same retries, ttr and history as any other channel.
func Example_libraryMode() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: server.Addr}) // your Redis
	defer client.Close()
	st, err := store.New(&store.Config{Client: client, Namespace: "example"})
	if err != nil {
		panic(err)
	}

	delivered := make(chan string, 1)
	handler := notify.SenderFunc(func(ctx context.Context, n *notify.Notification) (notify.Response, error) {
		delivered <- fmt.Sprintf("attempt %d of %s: %s", n.Attempts, n.ID, n.Payload)
		return notify.Response{}, nil // nil: done; notify.Permanent(err): dead; other errors: retried
	})
	d, err := schedule.New(&schedule.Config{Store: st, Handlers: map[string]notify.Sender{"invoices": handler}})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer d.Stop()

	policies, _ := policy.NewSet(nil, nil)
	delay := notify.Duration(50 * time.Millisecond)
	n, err := policies.Resolve(&notify.Request{
		ID: "invoice-42", Topic: "invoices", Channel: notify.ChannelPull,
		Payload: json.RawMessage(`{"invoice":42}`), Delay: &delay,
	}, time.Now(), 0)
	if err != nil {
		panic(err)
	}
	if _, _, err := st.Enqueue(ctx, n, false); err != nil {
		panic(err)
	}
	fmt.Println(<-delivered)
	// Output: attempt 0 of invoice-42: {"invoice":42}
}
