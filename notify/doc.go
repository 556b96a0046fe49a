// Package notify holds Herald's lowest-level shared types: the Notification
// model and its validation, the attempt history, the outcome of an attempt,
// the Sender interface the dispatcher calls, and the sentinel errors that the
// store, the dispatcher and the API share.
//
// It imports no other Herald package, so senders (notify/webhook,
// notify/sms, notify/poll) and library-mode handlers depend on it alone.
// What a sender needs of a notification's policy and topic (timeout,
// retry_on, success_body, the poll condition) it declares as Rules, read
// through a RulesFunc; package policy provides them (policy.CurrentRules),
// so the dependency points from policy to notify and never back.
//
// # Outcomes
//
// A Sender reports an attempt by its error: nil is success, an error wrapped
// with Permanent sends the notification straight to the dead-letter set, and
// any other error is retried on the notification's backoff array. Retry (or a
// plain error) asks for the next attempt; Retry with a retry-after asks for it
// no earlier than that, when the policy honours Retry-After.
//
//	func(ctx context.Context, n *notify.Notification) (notify.Response, error) {
//		if err := charge(ctx, n.Payload); err != nil {
//			if errors.Is(err, errCardDeclined) {
//				return notify.Response{}, notify.Permanent(err)
//			}
//			return notify.Response{}, err // retried
//		}
//		return notify.Response{}, nil
//	}
package notify
