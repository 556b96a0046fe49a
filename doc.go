// Package herald is the Go front door of Herald, a retry-policy
// notification dispatcher: services enqueue webhooks, SMS, payment polls
// and jobs for their own handlers, with a send time and a backoff array;
// Herald keeps them in Redis, starts each attempt on time (never early),
// retries on the array's schedule, and moves what never succeeds to a
// dead-letter set from which an operator can replay it.
//
// A library user needs this package and a go-redis client. The HTTP API,
// the CLI and `herald serve` are built from the same parts (packages
// client, schedule and store).
//
// # Enqueue
//
// A Client stores notifications. Enqueue takes a topic, a JSON payload and
// options:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	c, err := herald.NewClient(rdb, nil)
//	res, err := c.Enqueue(ctx, "invoices", map[string]any{"invoice": 42},
//		herald.ID("invoice-42"),              // idempotency key
//		herald.Delay(30*time.Minute),         // or herald.SendAt(t)
//		herald.Backoff(0, time.Minute, time.Hour))
//
// The id makes an enqueue idempotent: the same id with the same content
// returns the stored notification (Existing), other content is ErrConflict
// unless Replace is given. Without a Channel option, and when the topic's
// configuration names none, a notification with a URL target is a webhook,
// one with a phone number an SMS, and one without a target a pull job for
// the topic's handler.
//
// # Move and cancel
//
// Enqueuing the id again with other content and Replace moves a
// notification that is not reserved (ErrReserved), from attempt 0; Cancel
// cancels it; Get reads its state, next attempt time and history:
//
//	res, err := c.Enqueue(ctx, "appointment-reminder", payload, herald.ID("appt-42"),
//		herald.Target("+14155550100"), herald.SendAt(newTime.Add(-30*time.Minute)), herald.Replace())
//	n, err := c.Cancel(ctx, "appt-42")
//
// Cancel does not stop an attempt under way, which is recorded in the
// history when it ends; a notification reserved but not yet started by a
// dispatcher is not attempted. The reminder example
// shows the whole course.
//
// # Handle
//
// A Worker runs handlers. Register one per topic, then Start:
//
//	w, err := herald.NewWorker(rdb, nil)
//	w.HandleFunc("invoices", func(ctx context.Context, job *herald.Job) error {
//		var inv Invoice
//		if err := job.Decode(&inv); err != nil {
//			return herald.Permanent(err) // dead at once: no retry will help
//		}
//		return send(ctx, inv) // nil: done; any other error: retried
//	})
//	err = w.Start(ctx)
//	defer w.Stop()
//
// A handler's nil finishes the notification. Permanent(err) sends it to the
// dead-letter set. Any other error retries it: attempt n+1 is due backoff[n+1]
// after the failure, and RetryAfter(err, d) asks for no sooner than d when
// the policy honours Retry-After. When the array is exhausted the
// notification is dead. The handler's context ends at the attempt's
// timeout or at its reservation's deadline, whichever comes first; an
// attempt that outlives its reservation counts as failed, so two attempts of
// one notification never run at once, however many workers share the Redis.
// Delivery is at least once: de-duplicate with Job.ID.
//
// # Policies
//
// A notification follows a retry policy: its backoff array, its ttr (how
// long one attempt may hold its reservation), a timeout, and which failures
// are retried. The "default" policy's array is 0s, 0s, 2m, 10m, 10m, 1h, 2h,
// 6h, 15h: 9 attempts over about 24h22m. NewPolicies or LoadPolicies build
// other policies and topic defaults; give the same set to the Client and
// the Worker. A notification keeps the array it was enqueued with, so a
// later policy change affects new notifications only.
package herald
