package asynqimport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/store"
)

// Defaults of Config.
const (
	// DialTimeoutDefault bounds connecting to the asynq deployment's Redis
	// and its first answer.
	DialTimeoutDefault = 5 * time.Second
	// PageSizeDefault is how many tasks are listed, stored and deleted at a
	// time.
	PageSizeDefault = 200
)

// State is a state of asynq tasks that can be imported.
type State string

// The states an import reads.
const (
	StateScheduled State = "scheduled"
	StateRetry     State = "retry"
	StatePending   State = "pending"
	StateArchived  State = "archived"
)

// AllStates are the states in the order an import reads them.
var AllStates = []State{StateScheduled, StateRetry, StatePending, StateArchived}

// ParseStates reads a state name, or "all" for AllStates.
func ParseStates(s string) ([]State, error) {
	if s == "all" {
		return AllStates, nil
	}
	if slices.Contains(AllStates, State(s)) {
		return []State{State(s)}, nil
	}
	return nil, fmt.Errorf("%q is not scheduled, retry, pending, archived or all", s)
}

// Mapping says which Herald topic, and optionally which policy, the tasks
// of one asynq type become.
type Mapping struct {
	Topic string
	// Policy replaces the topic's policy when set.
	Policy string
}

// ParseMapping reads "TYPE=TOPIC" or "TYPE=TOPIC:POLICY". The type may hold
// ':' and '=' (asynq types often look like "email:deliver"); topics and
// policies hold neither, so the last '=' and the first ':' after it split.
func ParseMapping(s string) (taskType string, m Mapping, err error) {
	eq := strings.LastIndexByte(s, '=')
	if eq < 1 {
		return "", m, fmt.Errorf("%q is not TYPE=TOPIC[:POLICY]", s)
	}
	taskType = s[:eq]
	m.Topic, m.Policy, _ = strings.Cut(s[eq+1:], ":")
	if !notify.ValidTopic(m.Topic) {
		return "", m, fmt.Errorf("%q: topic %q must match [a-z0-9._-]{1,64}", s, m.Topic)
	}
	return taskType, m, nil
}

// Store is what an import needs of Herald's store; *store.Store has it.
// The store's enqueue is used rather than the client's because only it
// takes the attempts already made and the dead-letter entry of an import.
// Its endpoints, with the policies file's, are those a topic may name.
type Store interface {
	EnqueueBatch(ctx context.Context, reqs []store.EnqueueRequest) ([]store.EnqueueResult, error)
	GetStates(ctx context.Context, ids []string) ([]*notify.Notification, error)
	Now() time.Time
	endpoint.Lookup
}

var _ Store = (*store.Store)(nil)

// Config configures an import.
type Config struct {
	// Addr is the asynq deployment's Redis, host:port. Required.
	Addr string
	// Password and DB are the asynq deployment's Redis password and
	// database. Default none and 0.
	Password string
	DB       int
	// DialTimeout bounds connecting to Addr and its first answer. Default
	// DialTimeoutDefault (5s).
	DialTimeout time.Duration
	// Queue is the asynq queue to read. Required.
	Queue string
	// States are the task states to read. Default AllStates.
	States []State
	// Map maps asynq task types to Herald topics. Tasks of other types are
	// skipped. Required.
	Map map[string]Mapping

	// Store is Herald's store. Required.
	Store Store
	// Policies are Herald's policies and topics. Required.
	Policies *policy.Set
	// MaxPayload bounds a payload in bytes, as the API's max_body does.
	// Default notify.MaxPayloadDefault.
	MaxPayload int

	// DryRun reads and checks everything and stores and deletes nothing.
	DryRun bool
	// Move deletes each task from asynq once Herald has stored it.
	Move bool
	// PageSize is how many tasks are handled at a time. Default
	// PageSizeDefault (200); at most store.MaxBatch.
	PageSize int
	// ProgressFunc, when set, is called after each page with the tasks
	// handled so far and the total the queue held at the start.
	ProgressFunc func(done, total int)
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.DialTimeout = cmp.Or(out.DialTimeout, DialTimeoutDefault)
	out.PageSize = cmp.Or(out.PageSize, PageSizeDefault)
	out.MaxPayload = cmp.Or(out.MaxPayload, notify.MaxPayloadDefault)
	if len(out.States) == 0 {
		out.States = AllStates
	}
	return &out
}

// Validate checks c, defaults applied, before anything is read: every
// mapping must name a topic (and policy) that a task with no payload and no
// target of its own could be enqueued to, so that a mistake in the mapping
// is found before the first task instead of as a skip for every one.
func (c *Config) Validate() error {
	switch {
	case c.Addr == "":
		return errors.New("asynqimport: Addr is required")
	case strings.TrimSpace(c.Queue) == "":
		return errors.New("asynqimport: Queue is required")
	case c.Store == nil || c.Policies == nil:
		return errors.New("asynqimport: Store and Policies are required")
	case len(c.Map) == 0:
		return errors.New("asynqimport: map at least one task type to a topic")
	case c.PageSize < 0 || c.PageSize > store.MaxBatch || c.DialTimeout < 0:
		return fmt.Errorf("asynqimport: PageSize must be 1 to %d and DialTimeout not negative", store.MaxBatch)
	}
	for _, t := range slices.Sorted(maps.Keys(c.Map)) {
		if _, err := c.probe(t); err != nil {
			return err
		}
	}
	return nil
}

// probe resolves what a task of type t with no payload and no target of
// its own becomes, or says why the mapping of t cannot take one.
func (c *Config) probe(t string) (*notify.Notification, error) {
	m := c.Map[t]
	req := &notify.Request{ID: "probe", Topic: m.Topic, Policy: m.Policy}
	n, err := c.Policies.Resolve(req, time.Now(), c.MaxPayload)
	var fe *notify.FieldError
	if errors.As(err, &fe) && fe.Field == "target" && c.Policies.Topics[m.Topic].Target == "" {
		// The probe's own target, the one a task lacks, is what
		// Resolve refused: the fix is in the topic, not in a URL.
		return nil, fmt.Errorf("map %s=%s: asynq tasks name no receiver, and topic %[2]s names none: "+
			"give it an endpoint or a target in the policies file (%w)", t, m.Topic, err)
	}
	if err != nil {
		return nil, fmt.Errorf("map %s=%s: %w", t, m.Topic, err)
	}
	return n, nil
}

// checkEndpoints refuses a validated c whose mapped topics name an endpoint
// that neither the policies file nor the store holds, as an enqueue over
// the API is refused: the store takes an import without that check, and
// every task would die at its first attempt.
func (c *Config) checkEndpoints(ctx context.Context) error {
	endpoints := endpoint.NewRegistry(&endpoint.RegistryConfig{
		FileFunc: func() map[string]endpoint.Endpoint { return c.Policies.Endpoints },
		Source:   c.Store,
	})
	for _, t := range slices.Sorted(maps.Keys(c.Map)) {
		n, err := c.probe(t)
		if err != nil {
			return err
		}
		if n.Endpoint == "" {
			continue
		}
		var fe *notify.FieldError
		switch err := endpoint.Check(ctx, endpoints, n.Endpoint); {
		case errors.As(err, &fe):
			return fmt.Errorf("map %s=%s: topic %[2]s names endpoint %q, which is neither in the policies file "+
				"nor registered (herald endpoint put): every task would fail at its first attempt", t, n.Topic, n.Endpoint)
		case err != nil:
			return fmt.Errorf("herald: %w", err)
		}
	}
	return nil
}

// Run imports the tasks cfg selects and returns what it did. An unreachable
// asynq Redis, an unknown queue or a failure of Herald's store ends it with
// an error; what was stored and deleted before stays so, and a second run
// carries on where it stopped.
func Run(ctx context.Context, cfg *Config) (*Summary, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.checkEndpoints(ctx); err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{
		Addr: cfg.Addr, Password: cfg.Password, DB: cfg.DB, DialTimeout: cfg.DialTimeout,
		// So that the ping's deadline holds for a Redis that accepts
		// connections and never answers.
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	pingCtx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	err := rdb.Ping(pingCtx).Err()
	cancel()
	switch {
	case redis.IsAuthError(err):
		// It answered: nothing timed out, the password is wrong.
		return nil, fmt.Errorf("asynq's Redis at %s refused the password: %w", cfg.Addr, err)
	case err != nil:
		return nil, fmt.Errorf("cannot reach asynq's Redis at %s within %s: %w", cfg.Addr, cfg.DialTimeout, err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	queues, err := insp.Queues()
	if err != nil {
		return nil, fmt.Errorf("asynq: list queues at %s: %w", cfg.Addr, err)
	}
	if !slices.Contains(queues, cfg.Queue) {
		if len(queues) == 0 {
			return nil, fmt.Errorf("asynq at %s has no queue %q, nor any other: is it the Redis (and db) asynq uses?", cfg.Addr, cfg.Queue)
		}
		slices.Sort(queues)
		return nil, fmt.Errorf("asynq at %s has no queue %q (it has: %s)", cfg.Addr, cfg.Queue, strings.Join(queues, ", "))
	}
	info, err := insp.GetQueueInfo(cfg.Queue)
	if err != nil {
		return nil, fmt.Errorf("asynq: queue %s: %w", cfg.Queue, err)
	}
	im := &importer{cfg: cfg, insp: insp, sum: &Summary{
		Queue: cfg.Queue, States: cfg.States, DryRun: cfg.DryRun, Move: cfg.Move, Reasons: []*Reason{},
		Active: info.Active, Aggregating: info.Aggregating,
	}}
	counts := map[State]int{StateScheduled: info.Scheduled, StateRetry: info.Retry, StatePending: info.Pending, StateArchived: info.Archived}
	for _, st := range cfg.States {
		im.total += counts[st]
	}
	for _, st := range cfg.States {
		if err := im.state(ctx, st, counts[st]); err != nil {
			return im.sum, err
		}
	}
	return im.sum, nil
}
