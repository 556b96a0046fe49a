// Package asynqimport moves the tasks of an asynq deployment
// (github.com/hibiken/asynq) into Herald: `herald import asynq` runs it.
// It reads the other deployment with asynq's Inspector and nothing else;
// no other part of Herald uses asynq.
//
// # What a task becomes
//
// Each task of one queue, in the states asked for (scheduled, retry,
// pending, archived), whose type is mapped to a Herald topic (and
// optionally a policy) becomes one notification of that topic:
//
//   - id: the asynq task id, so a second run finds what the first stored.
//   - payload: a payload that is valid JSON is kept as it is. Any other
//     payload (asynq payloads are bytes: protobuf, gob, plain text) becomes a
//     JSON string holding its standard base64, which is what encoding/json
//     makes of a []byte, so a Go consumer that decodes the payload into a
//     []byte gets the original bytes back. Summary.Base64 counts them.
//   - due time: a scheduled or retry task's next attempt is due at its
//     NextProcessAt, to the second asynq keeps; a pending task is due now.
//     When the mapped policy's first backoff entry is not zero, send_at is
//     set that much earlier, so the due time stays what asynq had.
//   - attempts: the Retried count, so the next attempt indexes the mapped
//     policy's backoff array there; past the array's end it gets one last
//     attempt. asynq's MaxRetry and retry delay function do not carry over.
//   - archived tasks go straight to Herald's dead-letter set with one history
//     entry: the LastErr at LastFailedAt, outcome "retry" when asynq ran out
//     of retries (Retried >= MaxRetry) and "permanent" otherwise (SkipRetry,
//     or archived by hand). asynq archives a task on the failure after its
//     last retry, or on a SkipRetry error (told by its LastErr, which holds
//     SkipRetry's text), without counting that failure, so such a task
//     counts Retried+1 attempts; one archived by hand counts
//     Retried, as its failures were counted when it was retried. asynq keeps
//     nothing that tells a task archived by hand while it waited for its
//     last retry from one asynq archived after that retry: it counts as the
//     latter, one attempt more. They replay and purge like any dead
//     notification.
//
// The topic's configuration supplies the channel, target and policy, as for
// any enqueue; the mapping's policy, when given, replaces the topic's. A
// topic that names an endpoint neither the policies file nor the store
// holds refuses the run before anything is read, where an enqueue over the
// API would be refused: every task would fail at its first attempt. Task
// headers, groups, deadlines and timeouts are asynq's own and are not
// carried.
//
// Active tasks (an asynq worker holds them) and aggregating ones (waiting
// for their group) are not read; Summary.Active and Summary.Aggregating
// count them, so that an operator does not retire asynq while it holds
// them. Completed tasks are done and not read either.
//
// # Idempotent runs
//
// A task whose id Herald already holds with the same content is counted as
// already present and not stored again, unless one side is dead and the
// other not: a task archived in asynq that Herald holds alive, or one
// brought back from the archive that Herald holds dead. That task, like one
// held with other content (the task changed in asynq since it was
// imported), is skipped, never replaced. A task whose type has no mapping
// is skipped and counted, never guessed. Every skip is counted by reason in
// the Summary, with the first ids.
//
// asynq task ids are unique per queue, Herald's ids across a deployment.
// Imported from a second queue, a task whose id an earlier queue's task
// took counts as already present when its content is the same (same topic,
// policy, payload and due time): the two become one notification, and
// Move deletes it from asynq all the same. With other content (another
// topic, say) it is skipped. Give such a task another id in asynq to
// import it.
//
// # Moving
//
// With Config.Move each task is deleted from asynq once Herald has stored
// it (imported or already present), batch by batch; a task that was
// skipped stays in asynq. Stop the asynq servers of the queue first (or
// pause the queue): a task one of them starts while the import runs could
// run in both systems. Tasks that arrive while an import runs may be left
// for the next run; run it until it reports nothing to import and no
// active or aggregating tasks.
package asynqimport
