// Package asynqtest starts an asynq deployment for tests of the asynq
// import: a redis-server of its own holding tasks in every state an import
// reads, put there by asynq's own client and server. It is test-only:
// production packages must not import it.
package asynqtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/heraldhq/herald/internal/redistest"
)

// Queue is the deployment's queue.
const Queue = "payments"

// The deployment's task types.
const (
	TypeOrder = "order:notify"
	TypeEmail = "email:send"
)

// The deployment's tasks, by id. All are TypeOrder but EmailPending.
const (
	// ScheduledJSON is due in an hour, with a JSON payload.
	ScheduledJSON = "sched-json"
	// ScheduledBytes is due in two hours, with a payload that is not JSON.
	ScheduledBytes = "sched-bytes"
	// Pending waits for a worker.
	Pending = "pend-json"
	// EmailPending is the one TypeEmail task, pending.
	EmailPending = "email-1"
	// RetryTwice failed twice and is due again in an hour (Retried 2).
	RetryTwice = "retry-twice"
	// DeadExhausted failed on its only retry and was archived (MaxRetry 1).
	DeadExhausted = "dead-exhausted"
	// DeadSkipped failed with asynq.SkipRetry on its first attempt.
	DeadSkipped = "dead-skip"
)

// Errors the deployment's handler returns.
const (
	HandlerError = "merchant down"
	SkipError    = "bad request"
)

// Deployment is an asynq deployment on a redis-server of its own.
type Deployment struct {
	// Addr is its Redis, host:port on loopback.
	Addr string
	// Inspector reads it.
	Inspector *asynq.Inspector
	// Tasks are what asynq reports of each task once all are in place.
	Tasks map[string]*asynq.TaskInfo
}

// Start starts a deployment for tb: it enqueues the tasks with asynq's
// client, runs an asynq server whose handler fails until the retry and
// archived tasks are where their names say, stops it, then enqueues the
// pending ones so that nothing runs them.
func Start(tb testing.TB) *Deployment {
	tb.Helper()
	srv := redistest.Start(tb, redistest.Options{})
	opt := asynq.RedisClientOpt{Addr: srv.Addr}
	d := &Deployment{Addr: srv.Addr, Inspector: asynq.NewInspector(opt), Tasks: map[string]*asynq.TaskInfo{}}
	tb.Cleanup(func() { _ = d.Inspector.Close() })
	cl := asynq.NewClient(opt)
	defer cl.Close()
	enqueue := func(id, typ, payload string, opts ...asynq.Option) {
		tb.Helper()
		opts = append(opts, asynq.Queue(Queue), asynq.TaskID(id))
		if _, err := cl.Enqueue(asynq.NewTask(typ, []byte(payload)), opts...); err != nil {
			tb.Fatalf("asynqtest: enqueue %s: %v", id, err)
		}
	}
	enqueue(RetryTwice, TypeOrder, `{"order":4}`, asynq.MaxRetry(5))
	enqueue(DeadExhausted, TypeOrder, `{"order":5}`, asynq.MaxRetry(1))
	enqueue(DeadSkipped, TypeOrder, `{"order":6}`)
	d.fail(tb, opt)

	enqueue(ScheduledJSON, TypeOrder, `{"order":1}`, asynq.ProcessIn(time.Hour))
	enqueue(ScheduledBytes, TypeOrder, "\xde\xad\xbe\xef", asynq.ProcessIn(2*time.Hour))
	enqueue(Pending, TypeOrder, `{"order":3}`)
	enqueue(EmailPending, TypeEmail, `{"to":"ops@example.com"}`)
	for _, id := range []string{ScheduledJSON, ScheduledBytes, Pending, EmailPending, RetryTwice, DeadExhausted, DeadSkipped} {
		info, err := d.Inspector.GetTaskInfo(Queue, id)
		if err != nil {
			tb.Fatalf("asynqtest: task %s: %v", id, err)
		}
		d.Tasks[id] = info
	}
	return d
}

// fail runs an asynq server whose handler fails every task, retrying the
// first failure at once and later ones in an hour, until RetryTwice waits
// for its third attempt and the dead ones are archived.
func (d *Deployment) fail(tb testing.TB, opt asynq.RedisClientOpt) {
	tb.Helper()
	srv := asynq.NewServer(opt, asynq.Config{
		Queues:                   map[string]int{Queue: 1},
		Concurrency:              2,
		TaskCheckInterval:        20 * time.Millisecond,
		DelayedTaskCheckInterval: 20 * time.Millisecond,
		ShutdownTimeout:          time.Second,
		RetryDelayFunc: func(n int, _ error, _ *asynq.Task) time.Duration {
			if n == 0 {
				return 0
			}
			return time.Hour
		},
		Logger:   logger{tb},
		LogLevel: asynq.WarnLevel,
	})
	handler := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		if id, _ := asynq.GetTaskID(ctx); id == DeadSkipped {
			return fmt.Errorf("%s: %w", SkipError, asynq.SkipRetry)
		}
		return errors.New(HandlerError)
	})
	if err := srv.Start(handler); err != nil {
		tb.Fatalf("asynqtest: start server: %v", err)
	}
	defer srv.Shutdown()
	want := map[string]func(*asynq.TaskInfo) bool{
		RetryTwice:    func(i *asynq.TaskInfo) bool { return i.State == asynq.TaskStateRetry && i.Retried == 2 },
		DeadExhausted: func(i *asynq.TaskInfo) bool { return i.State == asynq.TaskStateArchived },
		DeadSkipped:   func(i *asynq.TaskInfo) bool { return i.State == asynq.TaskStateArchived },
	}
	deadline := time.Now().Add(20 * time.Second)
	for id, done := range want {
		for {
			info, err := d.Inspector.GetTaskInfo(Queue, id)
			if err == nil && done(info) {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("asynqtest: task %s did not reach its state within 20s (last: %+v, %v)", id, info, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// logger routes the asynq server's log to the test's.
type logger struct{ tb testing.TB }

func (l logger) Debug(args ...any) { l.tb.Log(append([]any{"asynq:"}, args...)...) }
func (l logger) Info(args ...any)  { l.tb.Log(append([]any{"asynq:"}, args...)...) }
func (l logger) Warn(args ...any)  { l.tb.Log(append([]any{"asynq:"}, args...)...) }
func (l logger) Error(args ...any) { l.tb.Log(append([]any{"asynq:"}, args...)...) }
func (l logger) Fatal(args ...any) { l.tb.Fatal(append([]any{"asynq:"}, args...)...) }

var _ asynq.Logger = logger{}
