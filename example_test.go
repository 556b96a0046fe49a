package herald_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald"
)

// A Go service enqueues a job with a delay and handles it in-process: one
// import besides go-redis.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr}) // your Redis
	defer rdb.Close()

	w, err := herald.NewWorker(rdb, &herald.WorkerConfig{Namespace: "example"})
	if err != nil {
		panic(err)
	}
	done := make(chan string, 1)
	w.HandleFunc("invoices", func(ctx context.Context, job *herald.Job) error {
		var inv struct{ Invoice int }
		if err := job.Decode(&inv); err != nil {
			return herald.Permanent(err)
		}
		done <- fmt.Sprintf("attempt %d of %s: invoice %d", job.Attempt, job.ID, inv.Invoice)
		return nil
	})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop()

	c, err := herald.NewClient(rdb, &herald.ClientConfig{Namespace: "example"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	res, err := c.Enqueue(ctx, "invoices", map[string]int{"invoice": 42},
		herald.ID("invoice-42"), herald.Delay(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.ID, res.Status == herald.Created)
	fmt.Println(<-done)
	// Output:
	// invoice-42 true
	// attempt 0 of invoice-42: invoice 42
}

// A handler's error retries the job on its backoff array; Permanent ends
// it at once in the dead-letter set.
func ExampleWorker_HandleFunc_retries() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr})
	defer rdb.Close()

	attempts := make(chan int, 3)
	w, _ := herald.NewWorker(rdb, &herald.WorkerConfig{Namespace: "example-retries"})
	w.HandleFunc("charges", func(ctx context.Context, job *herald.Job) error {
		attempts <- job.Attempt
		if job.Attempt < 2 {
			return errors.New("provider busy") // retried
		}
		return nil
	})
	_ = w.Start(ctx)
	defer w.Stop()

	c, _ := herald.NewClient(rdb, &herald.ClientConfig{Namespace: "example-retries"})
	defer c.Close()
	_, _ = c.Enqueue(ctx, "charges", map[string]int{"amount": 100}, herald.ID("charge-7"),
		herald.Backoff(0, 10*time.Millisecond, 20*time.Millisecond))
	for range 3 {
		fmt.Println("attempt", <-attempts)
	}
	n := waitFinished(c, "charge-7")
	fmt.Println(n.State, len(n.History))
	// Output:
	// attempt 0
	// attempt 1
	// attempt 2
	// succeeded 3
}

// waitFinished polls until id has succeeded, died or been cancelled.
func waitFinished(c *herald.Client, id string) *herald.Notification {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if n, err := c.Get(context.Background(), id); err == nil && n.State.Finished() {
			return n
		}
	}
	panic(id + " did not finish in 10s")
}

// An appointment service sends an SMS reminder 30 minutes before each
// appointment. The reminder's id is the appointment's, so that a retried
// call is harmless; when the appointment moves, Replace moves its reminder,
// and when it is cancelled, Cancel cancels it.
func Example_reminder() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr})
	defer rdb.Close()
	c, err := herald.NewClient(rdb, &herald.ClientConfig{Namespace: "example-reminders"})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	remind := func(appt time.Time, opts ...herald.EnqueueOption) *herald.EnqueueResult {
		// Without a template, an SMS's payload is its text.
		text := "Ada, a reminder of your appointment at " + appt.Format("15:04") + "."
		res, err := c.Enqueue(ctx, "appointment-reminder", map[string]string{"text": text}, append(opts,
			herald.ID("appt-42"), herald.Target("+14155550100"), herald.SendAt(appt.Add(-30*time.Minute)))...)
		if err != nil {
			panic(err)
		}
		return res
	}
	berlin := time.FixedZone("CEST", 2*60*60)
	res := remind(time.Date(2030, time.April, 2, 9, 0, 0, 0, berlin))
	fmt.Println(res.Status == herald.Created, res.Notification.Channel, res.Notification.NextAttemptAt)

	res = remind(time.Date(2030, time.April, 2, 11, 0, 0, 0, berlin), herald.Replace()) // it moves
	fmt.Println(res.Status == herald.Replaced, res.Notification.NextAttemptAt)

	n, err := c.Cancel(ctx, "appt-42") // it is cancelled
	if err != nil {
		panic(err)
	}
	fmt.Println(n.State, n.NextAttemptAt)
	// Output:
	// true sms 2030-04-02 06:30:00 +0000 UTC
	// true 2030-04-02 08:30:00 +0000 UTC
	// cancelled <nil>
}

// A program that runs a Worker routes go-redis's own messages, which an
// outage repeats several times a second, to its logger, once, at start.
func ExampleRouteRedisLogs() {
	herald.RouteRedisLogs(slog.Default())
	// Output:
}
