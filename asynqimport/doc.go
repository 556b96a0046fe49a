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
//     last retry without counting it, so an archived task that failed counts
//     Retried+1 attempts. They replay and purge like any dead notification.
//
// The topic's configuration supplies the channel, target and policy, as for
// any enqueue; the mapping's policy, when given, replaces the topic's. Task
// headers, groups, deadlines and timeouts are asynq's own and are not
// carried. Active, aggregating and completed tasks are not read.
//
// # Idempotent runs
//
// A task whose id Herald already holds with the same content is counted as
// already present and not stored again; one held with other content (the
// task changed in asynq since it was imported) is skipped, never replaced.
// A task whose type has no mapping is skipped and counted, never guessed.
// Every skip is counted by reason in the Summary, with the first ids.
//
// # Moving
//
// With Config.Move each task is deleted from asynq once Herald has stored
// it (imported or already present), batch by batch; a task that was
// skipped stays in asynq. Stop the asynq servers of the queue first (or
// pause the queue): a task one of them starts while the import runs could
// run in both systems. Tasks that arrive while an import runs may be left
// for the next run; run it until it reports nothing to import.
package asynqimport
