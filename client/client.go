// Package client is Herald's Go client: it enqueues, cancels and reads
// notifications, and reserves and acknowledges pull work, against Redis
// directly, without an HTTP hop. The HTTP API is built on it, so a Go service
// and a worker in any other language get the same validation, the same topic
// and policy defaults and the same answers.
//
// # Enqueue
//
// Enqueue resolves a notify.Request with the current policies (the topic's
// defaults, then the policy's, see policy.Set.Resolve) and stores it. The
// status tells what happened: store.Created for a new id, store.Existing for
// the same id and content (nothing changed), store.Replaced when Replace
// rescheduled it. Other content under an existing id is notify.ErrConflict;
// a replace of a reserved notification is notify.ErrReserved. A bad request
// is a *notify.FieldError naming the field.
//
//	c, err := client.New(&client.Config{Store: st, PoliciesFunc: watcher.Current})
//	n, status, err := c.Enqueue(ctx, &notify.Request{
//		ID: "appt-42-reminder", Topic: "appointment-reminder",
//		Target: "+14155550100", SendAt: &remindAt,
//	})
//
// # Pull
//
// Consumers of a pull topic Reserve due notifications (waiting up to a given
// time for one to become due), then Ack or Nack each with the receipt it came
// with. A receipt stops holding once the reservation's ttr has run out and
// the dispatcher's reaper has counted the attempt as failed, or once the
// notification is cancelled: Ack and Nack then return
// notify.ErrStaleReceipt, so a slow consumer never finishes someone else's
// attempt. Nack decides the next step with the same rules as the dispatcher
// (policy.Policy.Decide).
//
// Expired reservations are taken back by the reaper of any running
// schedule.Dispatcher (it serves every queue of the namespace), so a
// deployment with pull topics runs at least one dispatcher even when it
// delivers no push channel.
package client

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// Defaults and limits of Config and of Reserve.
const (
	// PollIntervalDefault is the longest a waiting Reserve goes without
	// asking Redis, a safety net for wake-ups lost while disconnected.
	PollIntervalDefault = time.Second
	// MaxReserve bounds the notifications one Reserve call hands out.
	MaxReserve = 100
)

// Observer is told what a client did; metrics.Metrics implements it. Calls
// come from many goroutines and must not block.
type Observer interface {
	// AttemptFinished and StoreError are as for the dispatcher: acks and
	// nacks of pull consumers are attempts too.
	schedule.Observer
	// Enqueued reports a notification that was stored (store.Created or
	// store.Replaced) or found already stored (store.Existing).
	Enqueued(n *notify.Notification, status store.EnqueueStatus)
}

// Tracer traces enqueues and consumers' attempts; the tracing package
// implements it with OpenTelemetry. Calls come from many goroutines.
type Tracer interface {
	// StartEnqueue is called, with the caller's context, for each resolved
	// notification before it is stored. It may add headers to n (a trace
	// context): they are stored and sent with every attempt, but are not
	// part of the content that decides whether an enqueue repeats an
	// earlier one. The returned function is called once with the outcome.
	StartEnqueue(ctx context.Context, n *notify.Notification) func(status store.EnqueueStatus, err error)
	// AttemptRecorded is called, with the ack's or nack's context, once a
	// consumer's attempt has been recorded: f's attempt ran from its
	// reservation to that answer, which came from another process.
	AttemptRecorded(ctx context.Context, f *store.Finish)
}

// Config configures a Client.
type Config struct {
	// Store is the notifications' state. Required.
	Store *store.Store
	// PoliciesFunc returns the current policies and topics (it may change on
	// reload). Default: the built-in default policy and no topics.
	PoliciesFunc func() *policy.Set
	// MaxPayload bounds a payload in bytes. Default
	// notify.MaxPayloadDefault (256 KiB).
	MaxPayload int
	// PollInterval is the longest a waiting Reserve goes without asking
	// Redis. Default PollIntervalDefault (1s).
	PollInterval time.Duration
	// Observer is told about enqueues, attempts and store errors. Optional.
	Observer Observer
	// Tracer traces enqueues and consumers' attempts. Nil, the default,
	// traces nothing and costs nothing.
	Tracer Tracer
	// StrictTopics refuses a request whose topic the policies do not name,
	// with a *notify.FieldError for topic, so that callers cannot create
	// topics at will. Default false: any valid topic name.
	StrictTopics bool
	// Endpoints finds the endpoints notifications name. Default: an
	// endpoint.Registry of the policies file's endpoints and those
	// registered over the API in Store.
	Endpoints endpoint.Lookup
	// TemplateFunc reports whether a template of that name is loaded, so
	// that a request naming one that is not is refused, with a
	// *notify.FieldError for template, rather than dying at its first
	// attempt. A topic's own template is the operator's, warned of at
	// start, and not checked. Default nil: any name is taken.
	TemplateFunc func(name string) bool
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.MaxPayload = cmp.Or(out.MaxPayload, notify.MaxPayloadDefault)
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	if out.PoliciesFunc == nil {
		set, _ := policy.NewSet(nil, nil)
		out.PoliciesFunc = func() *policy.Set { return set }
	}
	if out.Observer == nil {
		out.Observer = nopObserver{}
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("client: Store is required")
	case c.MaxPayload < 0 || c.PollInterval < 0:
		return errors.New("client: MaxPayload and PollInterval must not be negative")
	}
	return nil
}

type nopObserver struct{}

func (nopObserver) AttemptFinished(*notify.Notification, notify.Attempt, notify.Action, time.Duration) {
}
func (nopObserver) StoreError(string, error)                           {}
func (nopObserver) Enqueued(*notify.Notification, store.EnqueueStatus) {}

// Client enqueues and consumes notifications. It is safe for concurrent use;
// Close it to stop listening for wake-ups.
type Client struct {
	cfg   *Config
	store *store.Store
	obs   Observer
	hub   *hub
	// unanswered holds reservations whose answers were lost, or whose
	// give-back failed, to give back once Redis answers again.
	unanswered store.Unanswered
	// pausedCache holds what is paused, for Reserve (pause.go).
	pausedCache pausedCache
}

// New returns a client for cfg.
func New(cfg *Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Endpoints == nil {
		cfg.Endpoints = endpoint.NewRegistry(&endpoint.RegistryConfig{
			FileFunc: func() map[string]endpoint.Endpoint { return cfg.PoliciesFunc().Endpoints },
			Source:   cfg.Store,
		})
	}
	return &Client{cfg: cfg, store: cfg.Store, obs: cfg.Observer, hub: newHub(cfg.Store)}, nil
}

// Close ends the wake-up subscription that waiting Reserve calls share.
// Reserve still works after Close, polling every PollInterval. A second
// Close does nothing.
func (c *Client) Close() error {
	c.hub.close()
	return nil
}

// Enqueue resolves and stores one notification; see EnqueueBatch. The
// returned record is the stored one: the new record, or for store.Existing,
// notify.ErrConflict and notify.ErrReserved the record already stored.
func (c *Client) Enqueue(ctx context.Context, req *notify.Request) (*notify.Notification, store.EnqueueStatus, error) {
	res, err := c.EnqueueBatch(ctx, []*notify.Request{req})
	if err != nil {
		return nil, 0, err
	}
	return res[0].Notification, res[0].Status, res[0].Err
}

// EnqueueBatch resolves up to store.MaxBatch requests with the current
// policies and stores the valid ones in one pipeline. The results follow the
// requests' order; a request that does not resolve has a *notify.FieldError
// in its result and is not stored. The returned error is for the whole batch:
// too many requests, or Redis unreachable.
func (c *Client) EnqueueBatch(ctx context.Context, reqs []*notify.Request) ([]store.EnqueueResult, error) {
	if len(reqs) > store.MaxBatch {
		return nil, notify.Errorf("notifications", "has %d entries, more than %d", len(reqs), store.MaxBatch)
	}
	set := c.cfg.PoliciesFunc()
	now := c.store.Now()
	results := make([]store.EnqueueResult, len(reqs))
	todo := make([]store.EnqueueRequest, 0, len(reqs))
	index := make([]int, 0, len(reqs))
	var traced []func(store.EnqueueStatus, error)
	for i, req := range reqs {
		var n *notify.Notification
		var err error
		if req == nil {
			err = notify.Errorf("notification", "is nil")
		} else {
			err = cmp.Or(c.checkStrict(set, req.Topic), req.CheckDurations())
		}
		if err == nil {
			n, err = set.Resolve(req, now, c.cfg.MaxPayload)
		}
		if err == nil && req.Template != "" && c.cfg.TemplateFunc != nil && !c.cfg.TemplateFunc(req.Template) {
			err = notify.Errorf("template", "%q is not a template this server has loaded (a file of its templates_dir)", req.Template)
		}
		if err == nil && n.Endpoint != "" {
			err = endpoint.Check(ctx, c.cfg.Endpoints, n.Endpoint)
		}
		if err != nil {
			results[i].Err = err
			continue
		}
		if c.cfg.Tracer != nil {
			traced = append(traced, c.cfg.Tracer.StartEnqueue(ctx, n))
		}
		todo = append(todo, store.EnqueueRequest{Notification: n, Replace: req.Replace})
		index = append(index, i)
	}
	if len(todo) == 0 {
		return results, nil
	}
	stored, err := c.store.EnqueueBatch(ctx, todo)
	if err != nil {
		for _, end := range traced {
			end(0, err)
		}
		c.storeError("enqueue", err)
		return nil, err
	}
	for j, r := range stored {
		if traced != nil {
			traced[j](r.Status, r.Err)
		}
		if r.Notification != nil {
			shown(r.Notification)
		}
		results[index[j]] = r
		if r.Err == nil {
			c.obs.Enqueued(r.Notification, r.Status)
		} else {
			c.storeError("enqueue", r.Err)
		}
	}
	return results, nil
}

// checkStrict refuses, with StrictTopics, a topic the policies do not name.
func (c *Client) checkStrict(set *policy.Set, topic string) error {
	if _, known := set.Topics[topic]; c.cfg.StrictTopics && !known {
		return notify.Errorf("topic", "%q is not a topic of the policies file, and only those are accepted", topic)
	}
	return nil
}

// Get returns a notification with its payload and history. The receipt of
// a reserved notification is left out: only the consumer that reserved it
// holds it. One due while its topic or endpoint is paused reads as Paused,
// with no next attempt time.
func (c *Client) Get(ctx context.Context, id string) (*notify.Notification, error) {
	n, err := c.store.Get(ctx, id)
	if err != nil {
		c.storeError("get", err)
		return nil, err
	}
	shown(n)
	if c.heldByPause(ctx, n) {
		n.Paused, n.NextAttemptAt = true, nil
	}
	return n, nil
}

// heldByPause reports whether n is a pull notification, due already, that
// waits for its topic's resume. No consumer takes work of a paused topic
// (Reserve), so none is parked as a dispatcher parks push work, and the
// record itself would read as scheduled and overdue.
func (c *Client) heldByPause(ctx context.Context, n *notify.Notification) bool {
	return n.State == notify.StateScheduled && n.Channel == notify.ChannelPull && !n.Paused && n.WaitingFor == "" &&
		n.NextAttemptAt != nil && !n.NextAttemptAt.After(c.store.Now()) && c.topicPaused(ctx, n.Topic)
}

// Cancel cancels a scheduled or reserved notification and returns its
// record; a cancelled one is returned unchanged. It is notify.ErrNotFound
// for an unknown id and notify.ErrFinished once the notification has
// succeeded or is dead. A reserved one may be in its attempt already: that
// attempt is not stopped, and may still deliver; when it ends it is
// recorded in the history and the notification stays cancelled (a
// consumer's ack or nack of it is notify.ErrCancelledMeanwhile, an
// ErrStaleReceipt). One a dispatcher reserved ahead of its busy workers,
// and has not started, is not attempted.
//
// The cancel of a reserved notification returns store.HeardWithin after
// it is recorded, the time every dispatcher takes to hear of it: a
// reminder cancelled must not go out once the cancel has answered. A
// dispatcher may hold a pull notification too, for a Worker's handler. A
// ctx that ends meanwhile ends the wait, not the cancel: the error says
// so.
func (c *Client) Cancel(ctx context.Context, id string) (*notify.Notification, error) {
	n, err := c.store.Cancel(ctx, id)
	if err != nil {
		c.storeError("cancel", err)
		return nil, err
	}
	if n.Receipt != "" {
		if err := settle(ctx, store.HeardWithin, "cancelled, but a dispatcher holding it reserved may not have heard yet"); err != nil {
			return nil, err
		}
	}
	shown(n)
	return n, nil
}

// ListDead returns a page of up to limit dead notifications (of every topic
// when topic is empty) and the cursor of the next page, "" on the last; pass
// "" to start. See store.Store.ListDead.
func (c *Client) ListDead(ctx context.Context, topic string, limit int, cursor string) ([]*notify.Notification, string, error) {
	items, next, err := c.store.ListDead(ctx, topic, limit, cursor)
	c.storeError("dead", err)
	return items, next, err
}

// Replay moves the dead notifications f selects back to their queue, due
// now: with opts.Reset their whole backoff array runs again, without it each
// goes on where its array stopped (store.DeadOptions). With opts.DryRun it
// only counts them. A window
// (Since, Until) goes with a Topic: with IDs it is a *notify.FieldError.
func (c *Client) Replay(ctx context.Context, f store.DeadFilter, opts store.DeadOptions) (matched, replayed int, err error) {
	matched, replayed, err = c.store.Replay(ctx, f, opts)
	c.storeError("replay", err)
	return matched, replayed, err
}

// Purge deletes the dead notifications f selects for good. With
// opts.DryRun it only counts them. A window goes with a Topic, as for
// Replay.
func (c *Client) Purge(ctx context.Context, f store.DeadFilter, opts store.DeadOptions) (matched, purged int, err error) {
	matched, purged, err = c.store.Purge(ctx, f, opts)
	c.storeError("purge", err)
	return matched, purged, err
}

// IDState is an id a replay or purge named that is not dead, and its
// state: a notify.State, or StateUnknown for an id with no record.
type IDState struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// StateUnknown is IDState's state of an id with no record: never enqueued,
// in another namespace, or deleted after its retention.
const StateUnknown = "unknown"

// NotDead returns the ids f names that are not dead, with their states, in
// the order given: what a replay or purge of f would leave alone, which an
// operator who mistyped an id needs to hear. It counts f's dead ones first
// (a dry run) and looks the ids up only when that comes up short; nil when
// f names no ids or every one is dead.
func (c *Client) NotDead(ctx context.Context, f store.DeadFilter) ([]IDState, error) {
	ids := slices.Compact(slices.Sorted(slices.Values(f.IDs)))
	if len(ids) == 0 {
		return nil, nil
	}
	dead, _, err := c.Replay(ctx, store.DeadFilter{IDs: ids}, store.DeadOptions{DryRun: true})
	if err != nil || dead == len(ids) {
		return nil, err
	}
	var given []string // f.IDs without repeats, in their order
	seen := map[string]bool{}
	for _, id := range f.IDs {
		if !seen[id] {
			seen[id] = true
			given = append(given, id)
		}
	}
	got, err := c.store.GetStates(ctx, given)
	if err != nil {
		c.storeError("get", err)
		return nil, err
	}
	var out []IDState
	for i, n := range got {
		switch {
		case n == nil:
			out = append(out, IDState{ID: given[i], State: StateUnknown})
		case n.State != notify.StateDead:
			out = append(out, IDState{ID: given[i], State: string(n.State)})
		}
	}
	return out, nil
}

// Stats returns the counts of every topic.
func (c *Client) Stats(ctx context.Context) (map[string]store.TopicStats, error) {
	stats, err := c.store.Stats(ctx)
	c.storeError("stats", err)
	return stats, err
}

// storeError reports err to the observer unless it is nil or an answer (a
// sentinel or a validation error) rather than a failure to reach Redis.
func (c *Client) storeError(op string, err error) {
	if err == nil {
		return
	}
	var fe *notify.FieldError
	for _, answer := range []error{notify.ErrNotFound, notify.ErrConflict, notify.ErrReserved, notify.ErrOrdered,
		notify.ErrFinished, notify.ErrStaleReceipt, endpoint.ErrNotFound} {
		if errors.Is(err, answer) {
			return
		}
	}
	if errors.As(err, &fe) || errors.Is(err, context.Canceled) {
		return
	}
	c.obs.StoreError(op, err)
}
