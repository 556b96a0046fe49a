package herald

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/redislog"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// The model, re-exported so that a library user needs this package alone.
type (
	// Notification is a stored notification and everything Herald knows of
	// it: state, attempts made, its backoff array and its history.
	Notification = notify.Notification
	// Attempt is one entry of a notification's history.
	Attempt = notify.Attempt
	// State is where a notification is in its life.
	State = notify.State
	// FieldError is a validation error naming the offending field, such as
	// "backoff[2]".
	FieldError = notify.FieldError
	// Request is a notification to enqueue, as the HTTP API takes it; see
	// Client.EnqueueBatch.
	Request = notify.Request
	// Duration is a time.Duration that reads "2m" or a number of seconds.
	Duration = notify.Duration
	// Sender delivers a push channel (webhook, sms, poll); see
	// WorkerConfig.Senders.
	Sender = notify.Sender
	// RetryPolicy is a retry policy: the backoff array, ttr, timeout and
	// which failures are retried.
	RetryPolicy = policy.Policy
	// Topic gives the notifications of a topic their defaults.
	Topic = policy.Topic
	// Policies is an immutable set of retry policies and topics.
	Policies = policy.Set
	// EnqueueStatus says what an enqueue did.
	EnqueueStatus = store.EnqueueStatus
)

// States of a notification.
const (
	StateScheduled = notify.StateScheduled
	StateReserved  = notify.StateReserved
	StateSucceeded = notify.StateSucceeded
	StateDead      = notify.StateDead
	StateCancelled = notify.StateCancelled
)

// What an enqueue did.
const (
	// Created: a new notification was stored.
	Created = store.Created
	// Existing: the id was already stored with the same content; nothing
	// changed.
	Existing = store.Existing
	// Replaced: the id was stored with other content and Replace
	// rescheduled it from attempt 0.
	Replaced = store.Replaced
)

// Channels a notification can be delivered on.
const (
	ChannelWebhook = notify.ChannelWebhook
	ChannelSMS     = notify.ChannelSMS
	ChannelPoll    = notify.ChannelPoll
	ChannelPull    = notify.ChannelPull
)

// Errors returned by the client and the worker; compare with errors.Is.
var (
	// ErrNotFound means no notification has the id (or it expired).
	ErrNotFound = notify.ErrNotFound
	// ErrConflict means an enqueue reused an id with other content and did
	// not ask to replace it, or asked for a replace that cannot be made
	// (ErrOtherShard).
	ErrConflict = notify.ErrConflict
	// ErrOtherShard means a replace would move the notification to another
	// shard of a Cluster (another order key, say), which one step cannot
	// do; it is an ErrConflict.
	ErrOtherShard = notify.ErrOtherShard
	// ErrReserved means the notification is reserved for an attempt (one
	// under way, or one a worker has taken and is about to start), so it
	// cannot be replaced; try again once that attempt has ended.
	ErrReserved = notify.ErrReserved
	// ErrFinished means the notification already succeeded or is dead, so
	// it can no longer be cancelled.
	ErrFinished = notify.ErrFinished
	// ErrOrdered means a replace was asked of a notification holding its
	// place in its order key's line.
	ErrOrdered = notify.ErrOrdered
	// ErrNotReplicated means a write reached the Redis master but not the
	// replicas asked for (ClientConfig.WaitReplicas), so it is not reported
	// done.
	ErrNotReplicated = notify.ErrNotReplicated
	// ErrOutOfMemory means Redis refused a write because its memory reached
	// maxmemory: an enqueue refused so changed nothing, and succeeds once
	// memory is freed or maxmemory raised.
	ErrOutOfMemory = notify.ErrOutOfMemory
	// ErrStaleReceipt means an ack or nack came after its reservation
	// ended.
	ErrStaleReceipt = notify.ErrStaleReceipt
)

// Permanent marks a handler's error as final: the notification goes to the
// dead-letter set without further attempts. A nil err stays nil.
func Permanent(err error) error { return notify.Permanent(err) }

// RetryAfter marks a handler's error as retryable no earlier than d from
// now, when the notification's policy honours Retry-After (up to its
// max_retry_after); otherwise the backoff array alone decides. Any error a
// handler returns is retried; RetryAfter only adds the wait. A nil err
// stays nil.
func RetryAfter(err error, d time.Duration) error { return notify.Retry(err, d) }

// NewPolicies returns a validated set of retry policies and topics. A
// "default" policy with the schedule 0s, 0s, 2m, 10m, 10m, 1h, 2h, 6h, 15h
// is added when policies has none.
func NewPolicies(policies map[string]RetryPolicy, topics map[string]Topic) (*Policies, error) {
	return policy.NewSet(policies, topics)
}

// LoadPolicies reads a policies file (see configs/policies.yaml).
func LoadPolicies(path string) (*Policies, error) { return policy.Load(path) }

// Defaults shared by ClientConfig and WorkerConfig.
const (
	// NamespaceDefault prefixes every Redis key.
	NamespaceDefault = store.NamespaceDefault
	// ShardsDefault is the number of partitions of a new namespace on a
	// Redis Cluster.
	ShardsDefault = store.ShardsDefault
	// ShardsSingleDefault is the number of partitions of a new namespace
	// on a single Redis (standalone or Sentinel).
	ShardsSingleDefault = store.ShardsSingleDefault
)

// ClientConfig configures a Client. The zero value works: namespace
// "herald", the namespace's shard count, the default policy.
type ClientConfig struct {
	// Namespace prefixes every key; producers and workers of one
	// deployment share it. Default NamespaceDefault ("herald").
	Namespace string
	// Shards is the number of partitions. A namespace's count is recorded
	// in Redis when it is first used, and calls fail while another is
	// configured. Default 0: the recorded count; for a new namespace
	// ShardsDefault (16) on a Cluster, ShardsSingleDefault (1) on a single
	// Redis.
	Shards int
	// Policies are the retry policies and topic defaults that enqueues
	// resolve against. Default: the default policy only.
	Policies *Policies
	// MaxPayload bounds a payload in bytes. Default 256 KiB.
	MaxPayload int
	// WaitReplicas, when above 0, makes Enqueue, EnqueueBatch and Cancel
	// wait until that many replicas have the change (Redis WAIT), and fail
	// with ErrNotReplicated when they do not within WaitTimeout, as
	// herald serve's redis.wait_replicas does. The change has then reached
	// the master: read it back before trying again. A Worker's reservations
	// wait too when its WorkerConfig.WaitReplicas says so. Default 0:
	// answer as soon as the master has it.
	WaitReplicas int
	// WaitTimeout bounds that wait. Default 1s.
	WaitTimeout time.Duration
	// Retention is how long succeeded and cancelled records are kept, as
	// herald serve's retention: give every process of a namespace the
	// same, since each one's sweeps delete the finished records past its
	// own. Default 7 days; -1 keeps them for ever.
	Retention time.Duration
	// Logger defaults to a warn-level text handler on stderr.
	Logger *slog.Logger
}

// Client enqueues notifications and reads and cancels them. It is
// safe for concurrent use; Close it when done (the Redis client stays
// open: it is the caller's).
type Client struct {
	client *client.Client
	// policies is what enqueues resolve against; Enqueue reads a topic's
	// channel from it.
	policies *Policies
}

// NewClient returns a client over rdb, any go-redis client: standalone,
// Sentinel (failover) or Cluster.
func NewClient(rdb redis.UniversalClient, cfg *ClientConfig) (*Client, error) {
	if cfg == nil {
		cfg = &ClientConfig{}
	}
	st, err := openStore(&store.Config{Client: rdb, Namespace: cfg.Namespace, Shards: cfg.Shards,
		WaitReplicas: cfg.WaitReplicas, WaitTimeout: cfg.WaitTimeout, Retention: cfg.Retention, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	set, err := policiesOrDefault(cfg.Policies)
	if err != nil {
		return nil, err
	}
	c, err := client.New(&client.Config{Store: st, PoliciesFunc: func() *policy.Set { return set }, MaxPayload: cfg.MaxPayload})
	if err != nil {
		return nil, err
	}
	return &Client{client: c, policies: set}, nil
}

// openStore opens the store of cfg, whose Client is the caller's rdb.
func openStore(cfg *store.Config) (*store.Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("herald: a Redis client is required")
	}
	return store.New(cfg)
}

func policiesOrDefault(set *Policies) (*Policies, error) {
	if set != nil {
		return set, nil
	}
	return policy.NewSet(nil, nil)
}

// Close stops the client's background listening for wake-ups. A second
// Close does nothing.
func (c *Client) Close() error { return c.client.Close() }

// EnqueueResult is what an enqueue stored.
type EnqueueResult struct {
	// ID is the notification's id: the one given with ID, or a random one.
	ID string
	// Status says whether the notification was Created, already Existing
	// with the same content, or Replaced.
	Status EnqueueStatus
	// Notification is the stored record.
	Notification *Notification
}

// EnqueueOption sets one field of a notification at enqueue.
type EnqueueOption func(*notify.Request)

// ID sets the notification's id, its idempotency key: enqueueing the same
// id with the same content again returns the stored one (Existing), with
// other content it is ErrConflict unless Replace is given. Without ID a
// random id is chosen. An id matches [A-Za-z0-9._:-]{1,128}.
func ID(id string) EnqueueOption { return func(r *notify.Request) { r.ID = id } }

// Delay sends the notification d from now (its first attempt is then due
// after the first backoff entry, normally 0). As for the HTTP API's delay,
// d is between 0 and 100 years: any other is a *FieldError for "delay", as
// is Delay together with SendAt. The delay as given is the content: the
// same d repeated later, as a retry after a lost answer is, is the same
// notification (Existing), due when the first call asked. A delay worked
// out from the clock, as time.Until(appt.Add(-30*time.Minute)), differs on
// every call, so that its retry would be ErrConflict: give such a time
// with SendAt.
func Delay(d time.Duration) EnqueueOption {
	return func(r *notify.Request) { v := notify.Duration(d); r.Delay = &v }
}

// SendAt sends the notification at t, to the millisecond, never earlier.
// As for the HTTP API's send_at, t is between the Unix epoch and the end
// of the year 9999 UTC.
func SendAt(t time.Time) EnqueueOption { return func(r *notify.Request) { r.SendAt = &t } }

// Backoff sets the notification's own backoff array instead of its
// policy's: attempt 0 is due backoff[0] after the send time, attempt n+1
// backoff[n+1] after attempt n failed; its length is the number of
// attempts. Each entry is between 0 and 100 years.
func Backoff(backoff ...time.Duration) EnqueueOption {
	return func(r *notify.Request) {
		r.Backoff = make([]notify.Duration, len(backoff))
		for i, d := range backoff {
			r.Backoff[i] = notify.Duration(d)
		}
	}
}

// Policy names the retry policy; default: the topic's, else "default".
func Policy(name string) EnqueueOption { return func(r *notify.Request) { r.Policy = name } }

// Target sets where a push notification goes: an http(s) URL for webhook
// and poll, an E.164 number for sms. With a target and no channel, a URL
// means webhook and a phone number sms.
func Target(target string) EnqueueOption { return func(r *notify.Request) { r.Target = target } }

// Endpoint names a registered endpoint (the policies file's endpoints:, or
// PUT /v1/endpoints) as the receiver instead of a target: its URL, secrets,
// limits and health apply. Without a channel it is a webhook.
func Endpoint(name string) EnqueueOption { return func(r *notify.Request) { r.Endpoint = name } }

// Channel sets the channel: ChannelWebhook, ChannelSMS, ChannelPoll or
// ChannelPull. Without it the topic's channel applies; a topic with none is
// pull (a Worker's handler takes it) unless Target says otherwise.
func Channel(channel string) EnqueueOption { return func(r *notify.Request) { r.Channel = channel } }

// TTR sets how long one attempt may hold its reservation before it counts
// as failed; default the policy's (30s). It is more than 0 and at most 100
// years. It does not lengthen an attempt: a handler's context still ends at
// the policy's timeout (default 10s) when that is sooner.
func TTR(d time.Duration) EnqueueOption {
	return func(r *notify.Request) { v := notify.Duration(d); r.TTR = &v }
}

// Headers adds HTTP headers to a webhook or poll request; a handler finds
// them in Job.Headers. Given more than once, the headers add up, a later
// value replacing an earlier one of the same name. h is copied.
func Headers(h map[string]string) EnqueueOption {
	return func(r *notify.Request) {
		if h == nil {
			return
		}
		if r.Headers == nil {
			r.Headers = make(map[string]string, len(h))
		}
		maps.Copy(r.Headers, h)
	}
}

// Template renders the payload with the named template before a sender
// (webhook, sms, poll) sends it; a handler gets the payload as enqueued.
func Template(name string) EnqueueOption { return func(r *notify.Request) { r.Template = name } }

// OrderKey orders the notification behind every earlier one of its topic
// with the same key: it is not attempted while one of them is scheduled,
// reserved or retrying, and starts once the earlier ones succeeded, died or
// were cancelled. A key matches [A-Za-z0-9._:-]{1,128}.
func OrderKey(key string) EnqueueOption { return func(r *notify.Request) { r.OrderKey = key } }

// Replace reschedules an existing notification of the same id with the new
// content, from attempt 0, unless it is reserved for an attempt
// (ErrReserved), holds its place in its order key's line (ErrOrdered), or
// would move to another shard (ErrOtherShard). A finished or cancelled one
// is scheduled anew. Content equal to the stored one changes nothing
// (Existing), whatever the state: a move retried after a lost answer is
// not made twice, and repeating the request of a reminder that was sent or
// cancelled does not schedule it again; change its content (its send time)
// or its id for that.
func Replace() EnqueueOption { return func(r *notify.Request) { r.Replace = true } }

// Enqueue stores a notification for topic with payload: a []byte or
// json.RawMessage holding JSON is stored as is (a []byte is not encoded as
// base64, as encoding/json would), anything else is encoded with
// encoding/json; nil stores no payload. A bad field is a *FieldError
// naming it. An id already stored with other content is ErrConflict (with
// Replace: ErrReserved, ErrOrdered or ErrOtherShard), and the result then
// holds the stored record beside the error. ErrNotReplicated means the
// master has it but too few replicas (ClientConfig.WaitReplicas). Any other
// error means Redis could not be reached or did not answer in time:
// whether the notification was stored is unknown, and the same call with
// the same ID is safe to repeat.
func (c *Client) Enqueue(ctx context.Context, topic string, payload any, opts ...EnqueueOption) (*EnqueueResult, error) {
	raw, err := encodePayload(payload)
	if err != nil {
		return nil, err
	}
	req := &notify.Request{Topic: topic, Payload: raw}
	for _, o := range opts {
		if o != nil { // an option left unset, as conditional options are
			o(req)
		}
	}
	res, err := c.EnqueueBatch(ctx, []*Request{req})
	if err != nil {
		return nil, err
	}
	return res[0].EnqueueResult, res[0].Err
}

// BatchResult is the outcome of one request of a batch: its result, or the
// error that kept it from being stored. Check Err first: when it is set,
// EnqueueResult is nil, and its fields (ID, Status) cannot be read.
type BatchResult struct {
	*EnqueueResult
	Err error
}

// EnqueueBatch stores up to 1000 requests in one round trip per Redis
// node. Results follow the requests' order, each with the error Enqueue
// would have returned for it: a request that fails validation has a
// *FieldError and is not stored, the others are. The error is for the
// whole batch: too many requests, or Redis unreachable.
func (c *Client) EnqueueBatch(ctx context.Context, reqs []*Request) ([]BatchResult, error) {
	set := c.policies
	resolved := make([]*notify.Request, len(reqs))
	for i, r := range reqs {
		resolved[i] = withDefaultChannel(r, set)
	}
	stored, err := c.client.EnqueueBatch(ctx, resolved)
	if err != nil {
		return nil, err
	}
	out := make([]BatchResult, len(stored))
	for i, r := range stored {
		out[i].Err = r.Err
		if r.Notification != nil {
			out[i].EnqueueResult = &EnqueueResult{ID: r.Notification.ID, Status: r.Status, Notification: r.Notification}
		}
	}
	return out, nil
}

// withDefaultChannel fills in the channel the front door infers when
// neither the request nor its topic names one: webhook for an endpoint,
// the target's kind, or pull.
func withDefaultChannel(r *notify.Request, set *Policies) *notify.Request {
	if r == nil || r.Channel != "" || set.Topics[r.Topic].Channel != "" {
		return r
	}
	out := *r
	target := cmp.Or(r.Target, set.Topics[r.Topic].Target)
	switch {
	// The request's endpoint replaces its topic's target, a phone number
	// as much as a URL.
	case r.Endpoint != "" || (target == "" && set.Topics[r.Topic].Endpoint != ""):
		out.Channel = notify.ChannelWebhook
	case target == "":
		out.Channel = notify.ChannelPull
	case notify.ValidE164(target):
		out.Channel = notify.ChannelSMS
	default:
		out.Channel = notify.ChannelWebhook
	}
	return &out
}

func encodePayload(payload any) (json.RawMessage, error) {
	switch p := payload.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return p, nil
	case []byte:
		return json.RawMessage(p), nil
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, &FieldError{Field: "payload", Message: fmt.Sprintf("cannot be encoded as JSON: %v", err)}
	}
	return b, nil
}

// Get returns a notification with its payload and history.
func (c *Client) Get(ctx context.Context, id string) (*Notification, error) {
	return c.client.Get(ctx, id)
}

// Cancel cancels a scheduled or reserved notification and returns it; it
// is ErrNotFound for an unknown id and ErrFinished once it succeeded or is
// dead. Cancelling a cancelled one returns it unchanged. A reserved one
// (StateReserved) may be in its attempt already: that attempt is not
// stopped, and may still deliver; when it ends it is recorded in the
// history, and the notification stays cancelled. One a dispatcher reserved
// ahead of its busy workers, and has not started, is not attempted.
func (c *Client) Cancel(ctx context.Context, id string) (*Notification, error) {
	return c.client.Cancel(ctx, id)
}

// Job is one attempt handed to a handler.
type Job struct {
	// ID is the notification's id, stable across attempts: use it to
	// de-duplicate, as delivery is at least once.
	ID    string
	Topic string
	// Payload is the JSON the notification was enqueued with: null for
	// one enqueued with a nil payload, so that Decode takes it.
	Payload json.RawMessage
	// Attempt is the 0-based index of this attempt.
	Attempt int
	// Headers are the notification's headers.
	Headers map[string]string
	// Deadline is when the reservation ends (its start plus the ttr): an
	// attempt still running then counts as failed. The handler's context
	// ends at the policy's timeout (default 10s) when that comes first, so
	// a job that needs longer needs a longer timeout as well as a longer
	// TTR.
	Deadline time.Time
}

// Decode unmarshals the job's JSON payload into v.
func (j *Job) Decode(v any) error { return json.Unmarshal(j.Payload, v) }

// Handler handles the jobs of a topic. Returning nil finishes the
// notification; Permanent(err) sends it to the dead-letter set; any other
// error retries it on its backoff array (RetryAfter asks for a later
// retry); these wrappers are found through fmt.Errorf's %w. A panic fails
// the attempt as an error does, and is logged at error level with its
// stack; so does a runtime.Goexit (a t.FailNow in a test's handler), the
// handler running in a goroutine of its own.
type Handler interface {
	Handle(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *Job) error { return f(ctx, job) }

var _ Handler = HandlerFunc(nil)

// WorkerConfig configures a Worker. The zero value works: namespace
// "herald", the namespace's shard count, 64 attempts at once, the default
// policy.
type WorkerConfig struct {
	// Namespace must match the producers'; Shards, as ClientConfig's, is
	// best left 0. Default NamespaceDefault.
	Namespace string
	Shards    int
	// Concurrency is the most attempts running at once. Default 64.
	Concurrency int
	// Policies supply the timeout and retry rules of each attempt.
	// Default: the default policy only.
	Policies *Policies
	// Senders deliver push channels (webhook, sms, poll) by channel name,
	// for a worker that also dispatches what it does not handle itself.
	// Optional.
	Senders map[string]Sender
	// Retention is how long succeeded and cancelled records are kept, as
	// herald serve's retention: give every process of a namespace the
	// same, since each one's sweeps delete the finished records past its
	// own. Default 7 days; -1 keeps them for ever.
	Retention time.Duration
	// DeadRetention is how long a dead notification stays in the
	// dead-letter set before its worker's sweeps delete it, as herald
	// serve's dead_retention; the shortest among a namespace's processes
	// applies. Default -1: kept until replayed or purged.
	DeadRetention time.Duration
	// WaitReplicas, when above 0, makes the worker's reservations and
	// outcomes wait until that many replicas have them (Redis WAIT), as
	// herald serve's redis.wait_replicas does, so that a failover cannot
	// start a second attempt of a job while the first runs. Give it the
	// producers' ClientConfig.WaitReplicas. Default 0.
	WaitReplicas int
	// WaitTimeout bounds that wait. Default 1s.
	WaitTimeout time.Duration
	// ShutdownTimeout is how long Stop waits for running attempts before
	// it ends their contexts and gives their jobs back, due again at once
	// and not counted as attempts: give it the longest a handler should be
	// let finish, within what the process is given to stop. Default 10s.
	ShutdownTimeout time.Duration
	// Logger defaults to a warn-level text handler on stderr. go-redis's
	// own messages go elsewhere: see RouteRedisLogs.
	Logger *slog.Logger
}

// RouteRedisLogs sends go-redis's own messages to log as warnings, each
// logged at most once every 30s with how many repeats went unlogged, as
// herald serve does: while Redis is down, go-redis writes "connection
// pool: failed to dial" to stderr several times a second, beside the
// worker's one warning of the outage. go-redis has one logger for the
// whole process, so this sets it for every go-redis client of the
// program: call it once, at start.
func RouteRedisLogs(log *slog.Logger) { redislog.Route(log) }

// Worker runs the handlers registered for topics: it reserves each topic's
// due jobs, calls the handler with the job's retries, ttr and history
// handled as for any channel, and reaps attempts that outlived their ttr.
// Register handlers, then Start; Stop waits for running attempts.
type Worker struct {
	rdb redis.UniversalClient
	cfg WorkerConfig
	log *slog.Logger

	mu         sync.Mutex // guards handlers and dispatcher
	handlers   map[string]notify.Sender
	dispatcher *schedule.Dispatcher
}

// NewWorker returns a worker over rdb.
func NewWorker(rdb redis.UniversalClient, cfg *WorkerConfig) (*Worker, error) {
	if cfg == nil {
		cfg = &WorkerConfig{}
	}
	if rdb == nil {
		return nil, errors.New("herald: a Redis client is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return &Worker{rdb: rdb, cfg: *cfg, log: log, handlers: map[string]notify.Sender{}}, nil
}

// Handle registers h for topic's jobs. It panics when called while the
// worker runs (between Start and Stop), with an invalid topic name, or for
// a topic that already has a handler: all are programming errors.
func (w *Worker) Handle(topic string, h Handler) {
	if !notify.ValidTopic(topic) {
		panic(fmt.Sprintf("herald: handler topic %q must match [a-z0-9._-]{1,64}", topic))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dispatcher != nil {
		panic("herald: Handle after Start")
	}
	if _, ok := w.handlers[topic]; ok {
		panic(fmt.Sprintf("herald: a handler is already registered for topic %q", topic))
	}
	w.handlers[topic] = notify.SenderFunc(func(ctx context.Context, n *notify.Notification) (notify.Response, error) {
		return notify.Response{}, w.handle(ctx, h, n)
	})
}

// handle runs h on an attempt of n. A panic or runtime.Goexit is the
// handler's failure, not the worker's: the dispatcher logs it and fails the
// attempt like any other.
func (w *Worker) handle(ctx context.Context, h Handler, n *notify.Notification) error {
	job := &Job{ID: n.ID, Topic: n.Topic, Payload: n.Payload, Attempt: n.Attempts, Headers: n.Headers}
	if len(job.Payload) == 0 {
		job.Payload = json.RawMessage("null") // a copy each time: handlers may write to it
	}
	if n.Deadline != nil {
		job.Deadline = *n.Deadline
	}
	return h.Handle(ctx, job)
}

// HandleFunc registers fn for topic's jobs; see Handle.
func (w *Worker) HandleFunc(topic string, fn func(ctx context.Context, job *Job) error) {
	w.Handle(topic, HandlerFunc(fn))
}

// Start starts reserving and running jobs and returns. It fails while the
// worker runs (a second Start), with neither handlers nor senders, or with
// a Shards the namespace's recorded count contradicts. A Redis that cannot
// answer yet does not fail it: the worker waits for Redis in the
// background. The worker reserves no more jobs once ctx ends (Stop still
// waits for those running), so give it a context that lasts as long as the
// worker, not one that bounds start-up.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dispatcher != nil {
		return errors.New("herald: worker already started")
	}
	st, err := openStore(&store.Config{Client: w.rdb, Namespace: w.cfg.Namespace, Shards: w.cfg.Shards,
		WaitReplicas: w.cfg.WaitReplicas, WaitTimeout: w.cfg.WaitTimeout,
		Retention: w.cfg.Retention, DeadRetention: w.cfg.DeadRetention, Logger: w.log})
	if err != nil {
		return err
	}
	if err := settleShards(ctx, st); err != nil {
		return err
	}
	set, err := policiesOrDefault(w.cfg.Policies)
	if err != nil {
		return err
	}
	d, err := schedule.New(&schedule.Config{
		Store:        st,
		Senders:      w.cfg.Senders,
		Handlers:     maps.Clone(w.handlers), // Handle may add to w's after a Stop
		PoliciesFunc: func() *policy.Set { return set },
		// An endpoint's max_in_flight, rate and health bind every
		// dispatcher of the namespace: a library worker's as much as those
		// of herald serve beside it.
		Endpoints: endpoint.NewRegistry(&endpoint.RegistryConfig{
			FileFunc: func() map[string]endpoint.Endpoint { return set.Endpoints },
			Source:   st,
		}),
		Concurrency:     w.cfg.Concurrency,
		ShutdownTimeout: w.cfg.ShutdownTimeout,
		Logger:          w.log,
	})
	if err != nil {
		return fmt.Errorf("herald: %w", err)
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	w.dispatcher = d
	return nil
}

// settleShardsTimeout bounds how long Start asks Redis for the namespace's
// shard count before leaving the question to the dispatcher.
const settleShardsTimeout = time.Second

// settleShards reads the namespace's shard count, so that a Shards setting
// it contradicts fails Start, as it fails herald serve: the dispatcher
// would otherwise retry for ever what no retry can mend. Any other failure
// is left to the dispatcher, which waits for Redis.
func settleShards(ctx context.Context, st *store.Store) error {
	ctx, cancel := context.WithTimeout(ctx, settleShardsTimeout)
	defer cancel()
	_, err := st.Shards(ctx)
	var fe *FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("herald: %w", err)
	}
	return nil
}

// Stop stops reserving, waits for running attempts (up to
// WorkerConfig.ShutdownTimeout, then gives them back unpenalised), records
// every outcome and returns. A handler that
// ignores its cancelled context for a further second is left running: its
// job stays reserved until its Deadline and is then retried, and what it
// returns is not recorded. Stop before Start, or a second Stop, does
// nothing. A stopped worker can be started again.
func (w *Worker) Stop() {
	w.mu.Lock()
	d := w.dispatcher
	w.mu.Unlock()
	if d == nil {
		return
	}
	d.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dispatcher == d { // else a concurrent Stop cleared it and a Start set another
		w.dispatcher = nil
	}
}
