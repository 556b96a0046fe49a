package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald"
)

// topic is the topic (asynq: task type) of every job the comparison makes.
const topic = "bench"

// concurrency is how many jobs a worker runs at once, asynq's and Herald's.
const concurrency = 16

// handler handles one attempt of a job: id is stable across attempts,
// attempt counts from 0.
type handler func(id string, attempt int, payload []byte) error

// subject is a job system under comparison, as its library API offers it.
type subject interface {
	// enqueue stores one job, due at at (the zero time: now).
	enqueue(ctx context.Context, payload []byte, at time.Time) error
	// enqueueBatch stores jobs in as few calls as the API allows.
	enqueueBatch(ctx context.Context, payloads [][]byte, at []time.Time) error
	// start starts a worker that runs h for the jobs.
	start(h handler) error
	// stop stops the worker, waiting for what it runs.
	stop()
	// close releases the producer's connections.
	close()
}

// newSubject opens a subject on the Redis at addr. With retry above zero
// each job has two attempts, the second retry after the first failed.
type newSubject func(addr string, retry time.Duration) (subject, error)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// heraldSubject goes through Herald's root package.
type heraldSubject struct {
	rdb    *redis.Client
	client *herald.Client
	retry  time.Duration
	worker *herald.Worker
	// target and senders, when set, make every job a webhook to target
	// delivered by senders (the webhook scenario).
	target  string
	senders map[string]herald.Sender
}

func newHerald(addr string, retry time.Duration) (subject, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := herald.NewClient(rdb, &herald.ClientConfig{Logger: quiet})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &heraldSubject{rdb: rdb, client: c, retry: retry}, nil
}

func (h *heraldSubject) backoff() []herald.Duration {
	if h.retry <= 0 {
		return nil
	}
	return []herald.Duration{0, herald.Duration(h.retry)}
}

func (h *heraldSubject) enqueue(ctx context.Context, payload []byte, at time.Time) error {
	return h.enqueueBatch(ctx, [][]byte{payload}, []time.Time{at})
}

func (h *heraldSubject) enqueueBatch(ctx context.Context, payloads [][]byte, at []time.Time) error {
	reqs := make([]*herald.Request, len(payloads))
	for i, p := range payloads {
		reqs[i] = &herald.Request{Topic: topic, Payload: p, Backoff: h.backoff()}
		if h.target != "" {
			reqs[i].Target, reqs[i].Channel = h.target, herald.ChannelWebhook
		}
		if !at[i].IsZero() {
			reqs[i].SendAt = &at[i]
		}
	}
	res, err := h.client.EnqueueBatch(ctx, reqs)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

func (h *heraldSubject) start(fn handler) error {
	w, err := herald.NewWorker(h.rdb, &herald.WorkerConfig{Concurrency: concurrency, Senders: h.senders, Logger: quiet})
	if err != nil {
		return err
	}
	if fn != nil {
		w.HandleFunc(topic, func(_ context.Context, job *herald.Job) error {
			return fn(job.ID, job.Attempt, job.Payload)
		})
	}
	h.worker = w
	return w.Start(context.Background())
}

func (h *heraldSubject) stop() {
	if h.worker != nil {
		h.worker.Stop()
	}
}

func (h *heraldSubject) close() {
	_ = h.client.Close()
	_ = h.rdb.Close()
}

// asynqSubject goes through asynq with its defaults.
type asynqSubject struct {
	opt    asynq.RedisClientOpt
	client *asynq.Client
	retry  time.Duration
	server *asynq.Server
}

func newAsynq(addr string, retry time.Duration) (subject, error) {
	opt := asynq.RedisClientOpt{Addr: addr}
	return &asynqSubject{opt: opt, client: asynq.NewClient(opt), retry: retry}, nil
}

func (a *asynqSubject) enqueue(ctx context.Context, payload []byte, at time.Time) error {
	var opts []asynq.Option
	if !at.IsZero() {
		opts = append(opts, asynq.ProcessAt(at))
	}
	if a.retry > 0 {
		opts = append(opts, asynq.MaxRetry(1))
	}
	_, err := a.client.EnqueueContext(ctx, asynq.NewTask(topic, payload), opts...)
	return err
}

// enqueueBatch makes single calls: asynq has no batch enqueue.
func (a *asynqSubject) enqueueBatch(ctx context.Context, payloads [][]byte, at []time.Time) error {
	for i, p := range payloads {
		if err := a.enqueue(ctx, p, at[i]); err != nil {
			return err
		}
	}
	return nil
}

func (a *asynqSubject) start(fn handler) error {
	cfg := asynq.Config{Concurrency: concurrency, LogLevel: asynq.ErrorLevel}
	if a.retry > 0 {
		retry := a.retry
		cfg.RetryDelayFunc = func(int, error, *asynq.Task) time.Duration { return retry }
	}
	a.server = asynq.NewServer(a.opt, cfg)
	return a.server.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		n, _ := asynq.GetRetryCount(ctx)
		return fn(id, n, t.Payload())
	}))
}

func (a *asynqSubject) stop() {
	if a.server != nil {
		a.server.Shutdown()
	}
}

func (a *asynqSubject) close() { _ = a.client.Close() }
