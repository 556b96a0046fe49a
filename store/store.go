// Package store keeps Herald's state in Redis: notifications, their queues,
// reservations, history, the dead-letter sets and the statistics.
//
// Every state change is one atomic Lua script (scripts.go) that moves a
// whole batch with one command per key. Keys are sharded by a hash of the
// notification id into partitions, each under one Redis Cluster hash tag
// (keys.go), so that a cluster spreads the shards; a namespace records its
// shard count at first use, 16 for a new one on a Cluster and 1 on a single
// Redis, where shards spread nothing (Config.Shards). On a Cluster a script
// touches one slot, and calls that span shards pipeline one script per
// shard; on a single Redis the hot-path scripts (enqueue, reserve, finish)
// take every shard of a batch in one call and count its moves in shard 0's
// statistics. Either way a batch costs one round trip per Redis node, not
// one per notification; single enqueues made at the same time are written
// together (batcher.go).
//
// A notification is stored as content written once and a small state line
// rewritten at each transition (codec.go), so no transition reads or writes a
// payload, and attempts are appended to the history without rewriting it.
// Due times keep the caller's instant rounded up to the millisecond, so no
// attempt starts early. The store knows nothing of HTTP or of retry policies:
// callers decide what a failure means and pass the next due time.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldhq/herald/notify"
)

// Defaults of Config.
const (
	NamespaceDefault = "herald"
	// ShardsDefault is the shard count of a new namespace on a Redis
	// Cluster, and of one created before shard counts were recorded.
	ShardsDefault = 16
	// ShardsSingleDefault is the shard count of a new namespace on a single
	// Redis (standalone or Sentinel), where shards spread nothing and every
	// one a batch touches costs its own commands.
	ShardsSingleDefault = 1
	RetentionDefault    = 7 * 24 * time.Hour
	// DeadRetentionDefault is Config.DeadRetention's default: dead
	// notifications are kept until replayed or purged.
	DeadRetentionDefault time.Duration = -1
	// MaxShards bounds Shards; more only costs idle round trips.
	MaxShards = 1024
	// WaitTimeoutDefault is Config.WaitTimeout's default.
	WaitTimeoutDefault = time.Second
	// WakeHorizonDefault is Config.WakeHorizon's default.
	WakeHorizonDefault = 5 * time.Second
)

// Config configures a Store.
type Config struct {
	// Client is any go-redis client: standalone, Sentinel (failover) or
	// Cluster. Required. Its MaxRetries applies to the store's reads; a
	// script is never sent twice, since a retry cannot tell a lost reply
	// from a call that never arrived.
	Client redis.UniversalClient
	// Namespace prefixes every key. Default NamespaceDefault ("herald").
	Namespace string
	// Shards is the number of partitions, each under one Redis Cluster hash
	// tag. A namespace's count is fixed when it is first used and recorded
	// in Redis (the meta hash); a Store configured with another count fails
	// every call with a *notify.FieldError naming shards, since using it
	// would strand what is stored. Default 0: the recorded count, or for a
	// new namespace ShardsDefault (16) on a Cluster and ShardsSingleDefault
	// (1) on a single Redis; a namespace that holds records but no count
	// was created with ShardsDefault.
	Shards int
	// ReadOnly opens the namespace without recording its shard count, for a
	// tool that only reads (the CLI's status, stats and listings): pointed
	// at the wrong Redis or namespace, it finds nothing and leaves nothing
	// behind there, where recording would create the namespace. A namespace
	// with no count recorded is read with the count recording would choose,
	// and the store asks again at each call: once another process records
	// a different count, every call fails, saying to open the store again,
	// rather than read the wrong shards. A ReadOnly Store must not be
	// written to: nothing would record the count its writes were laid out
	// by.
	ReadOnly bool
	// Retention is how long succeeded and cancelled records are kept, and
	// a shard's quarantine after the last record moved there. Default
	// RetentionDefault (7 days); -1 keeps them forever. Dead records go by
	// DeadRetention.
	Retention time.Duration
	// DeadRetention is how long a dead notification stays in the
	// dead-letter set, to be replayed or purged, counted from the time it
	// died (or was imported dead): Sweep then deletes it with its record
	// and history. A replay takes it out of the set, and a later death
	// counts afresh. Each Store's sweep deletes by its own setting, so the
	// shortest of a namespace's processes applies. Default
	// DeadRetentionDefault (-1): kept until replayed or purged, so that
	// setting nothing never deletes a dead letter an operator still means
	// to replay.
	DeadRetention time.Duration
	// WaitReplicas, when above 0, makes every write whose success is
	// reported (enqueue, cancel, replay, purge, finish; a pause or resume,
	// an endpoint stored, enabled or deleted, a sign-out) wait until that
	// many replicas have it (Redis WAIT), and fail with
	// notify.ErrNotReplicated when they do not within WaitTimeout. Reserve
	// waits too, and gives back unstarted what no replica confirmed.
	// Default 0: answer as soon as the master has it.
	WaitReplicas int
	// WaitTimeout bounds that wait. Default WaitTimeoutDefault (1s).
	WaitTimeout time.Duration
	// WakeHorizon is how far ahead a notification may be due and still
	// wake sleeping dispatchers when it becomes a queue's earliest; one due
	// later costs no wake-up, since every dispatcher polls each queue more
	// often than that (schedule.PollIntervalDefault, 1s). Keep it above
	// the dispatchers' poll interval. Default WakeHorizonDefault (5s).
	WakeHorizon time.Duration
	// Logger defaults to a warn-level text handler on stderr.
	Logger *slog.Logger
	// TimeNowFunc is the clock; tests may stub it. Default time.Now.
	TimeNowFunc func() time.Time
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.Namespace = cmp.Or(out.Namespace, NamespaceDefault)
	out.Retention = cmp.Or(out.Retention, RetentionDefault)
	out.DeadRetention = cmp.Or(out.DeadRetention, DeadRetentionDefault)
	out.WakeHorizon = cmp.Or(out.WakeHorizon, WakeHorizonDefault)
	out.WaitTimeout = cmp.Or(out.WaitTimeout, WaitTimeoutDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if out.TimeNowFunc == nil {
		out.TimeNowFunc = time.Now
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("store: Client is required")
	case c.Shards < 0 || c.Shards > MaxShards:
		return fmt.Errorf("store: shards must be between 1 and %d, or 0 for the namespace's", MaxShards)
	case strings.ContainsAny(c.Namespace, "{}"):
		return errors.New("store: namespace must not contain { or }")
	case c.Retention < -1:
		return errors.New("store: retention must be positive, or -1 to keep records")
	case c.DeadRetention < -1:
		return errors.New("store: dead_retention must be positive, or -1 to keep dead notifications")
	case c.WaitReplicas < 0 || c.WaitTimeout < 0:
		return errors.New("store: wait_replicas and wait_timeout must not be negative")
	case c.WaitTimeout > 0 && c.WaitTimeout < time.Millisecond:
		// WAIT takes milliseconds, and WAIT n 0 waits for ever.
		return errors.New("store: wait_timeout must be at least 1ms")
	}
	return nil
}

// Store is Herald's Redis state. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	keys   keys
	cfg    *Config
	// rotate turns the first shard served when a reservation is smaller
	// than the shards with due work.
	rotate atomic.Int64
	// batcher writes concurrent single enqueues together.
	batcher batcher
	aheadMu sync.Mutex // guards the fields below
	// holder starts every receipt of this Store's reservations, and
	// holders are all it had (newHolderLocked).
	holder  string
	holders map[string]bool
	// aheadNext is, per queue, the number of the last notification this
	// Store reserved ahead (ReserveAhead); aheadWant, per record, the
	// highest whose start was noted (Start), and aheadStarted the highest
	// written.
	aheadNext               map[string]int64
	aheadWant, aheadStarted map[startRecord]int64
	// startsRunning is set while the writer of starts runs (writeStarts);
	// startsWrote is closed, and replaced, as it ends a write; startsAt is
	// when it last wrote, and startsErr why that failed.
	startsRunning bool
	startsWrote   chan struct{}
	startsAt      time.Time
	startsErr     error
	// oneNode is set when every shard lives on one Redis (a standalone or
	// Sentinel-managed master, not a Cluster): a script may then span
	// shards.
	oneNode bool
	// quarantined counts the records moved aside as undecodable.
	quarantined atomic.Int64

	openMu sync.Mutex // serializes open
	// opened is set once keys.shards holds the namespace's shard count
	// (open): every method that uses keys opens first.
	opened atomic.Bool
	// guessed is the count a ReadOnly store set keys to for a namespace
	// with none recorded, 0 before; guarded by openMu. Such a store asks
	// again at each call until a count is recorded.
	guessed int

	actMu sync.Mutex // guards actMinute
	// actMinute is, per shard, the latest minute whose activity hash a
	// finish of this store is known to have given an expiry.
	actMinute map[int]int64
}

// New returns a Store for cfg.
func New(cfg *Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{client: cfg.Client, keys: keys{ns: cfg.Namespace, shards: cfg.Shards}, cfg: cfg}
	s.batcher.store = s
	s.holders, s.aheadNext = map[string]bool{}, map[string]int64{}
	s.aheadWant, s.aheadStarted = map[startRecord]int64{}, map[startRecord]int64{}
	s.newHolderLocked()
	s.startsWrote = make(chan struct{})
	_, s.oneNode = cfg.Client.(*redis.Client)
	return s, nil
}

// counters is the shard whose stats and activity hashes count the moves
// of shard's notifications in the hot path: shard itself on a Cluster,
// where a script touches one slot; shard 0 on a single Redis, where one
// hash for every shard saves a command per shard in each batch. Readers sum
// the hashes of every shard, so a count is right in either place.
func (s *Store) counters(shard int) int {
	if s.oneNode {
		return 0
	}
	return shard
}

// Shards returns the namespace's number of partitions.
func (s *Store) Shards(ctx context.Context) (int, error) {
	if err := s.open(ctx); err != nil {
		return 0, err
	}
	return s.keys.shards, nil
}

// open settles the namespace's shard count once, the first time a method
// needs it; a failure is returned and the next call tries again.
func (s *Store) open(ctx context.Context) error {
	if s.opened.Load() {
		return nil
	}
	s.openMu.Lock()
	defer s.openMu.Unlock()
	if s.opened.Load() {
		return nil
	}
	n, recorded, err := s.recordShards(ctx)
	switch {
	case err != nil:
		return err
	case s.guessed != 0 && n != s.guessed:
		// keys cannot change under the calls that use them: loud rather
		// than reading the wrong shards.
		return fmt.Errorf("store: namespace %q was read with %d shards before a count was recorded, and %d has been recorded since: "+
			"open the store again", s.keys.ns, s.guessed, n)
	case s.guessed == 0:
		s.keys.setShards(n)
	}
	if !recorded {
		s.guessed = n
		return nil
	}
	s.opened.Store(true)
	return nil
}

// recordShards returns the namespace's shard count, recording it when it
// has none: the configured count, or the default (see Config.Shards). A
// ReadOnly store records nothing, and is told whether a count was recorded.
func (s *Store) recordShards(ctx context.Context) (int, bool, error) {
	meta := s.keys.meta()
	for range 2 {
		v, err := s.client.HGet(ctx, meta, "shards").Result()
		switch {
		case err == nil:
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 1 || n > MaxShards {
				return 0, false, fmt.Errorf("store: %s holds shards %q, not a shard count", meta, v)
			}
			if s.cfg.Shards != 0 && s.cfg.Shards != n {
				return 0, false, notify.Errorf("shards", "is %d, but namespace %q has %d shards (recorded in %s); "+
					"another count would strand what is stored, so leave shards unset or set it to %d", s.cfg.Shards, s.keys.ns, n, meta, n)
			}
			return n, true, nil
		case !errors.Is(err, redis.Nil):
			return 0, false, fmt.Errorf("store: read the shard count of namespace %q: %w", s.keys.ns, err)
		}
		n := s.cfg.Shards
		if n == 0 {
			n = ShardsDefault
			if s.oneNode {
				legacy, err := s.holdsRecords(ctx)
				if err != nil {
					return 0, false, err
				}
				if !legacy {
					n = ShardsSingleDefault
				}
			}
		}
		if s.cfg.ReadOnly {
			return n, false, nil
		}
		// Two processes opening a new namespace at once agree on the first
		// count recorded: the loser reads it back.
		if err := s.client.HSetNX(ctx, meta, "shards", n).Err(); err != nil {
			return 0, false, fmt.Errorf("store: record the shard count of namespace %q: %w", s.keys.ns, outOfMemory(err))
		}
	}
	return 0, false, fmt.Errorf("store: the shard count of namespace %q keeps vanishing", s.keys.ns)
}

// holdsRecords reports whether the namespace holds what a version that
// did not record its shard count wrote with ShardsDefault shards. Only
// shards past the first tell: a single shard's keys are those of shard 0
// too, and what a namespace holds in shard 0 alone is where one shard
// finds it, whichever layout wrote it. (A process that read one shard
// keeps writing there when Redis restarts without its data.)
func (s *Store) holdsRecords(ctx context.Context) (bool, error) {
	legacy := keys{ns: s.keys.ns, shards: ShardsDefault}
	var names []string
	for shard := 1; shard < ShardsDefault; shard++ {
		names = append(names, legacy.job(shard), legacy.stats(shard), legacy.deadAll(shard))
	}
	n, err := s.client.Exists(ctx, names...).Result()
	if err != nil {
		return false, fmt.Errorf("store: look for records in namespace %q: %w", s.keys.ns, err)
	}
	return n > 0, nil
}

// Namespace returns the key prefix.
func (s *Store) Namespace() string { return s.keys.ns }

// Now returns the store's clock.
func (s *Store) Now() time.Time { return s.cfg.TimeNowFunc() }

// ClockSkew returns how far the store's clock (Now) is ahead of Redis's,
// negative when behind, and within how much that is known: half the round
// trip of the TIME command that reads Redis's clock. Due times and
// reservations' deadlines are judged by each host's clock, so hosts whose
// clocks disagree start attempts early or late by as much.
func (s *Store) ClockSkew(ctx context.Context) (skew, within time.Duration, err error) {
	before := s.Now()
	redisNow, err := s.client.Time(ctx).Result()
	after := s.Now()
	if err != nil {
		return 0, 0, fmt.Errorf("read Redis's clock: %w", err)
	}
	half := after.Sub(before) / 2
	return before.Add(half).Sub(redisNow), half, nil
}

// Ping reports whether Redis answers; /readyz uses it.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

func (s *Store) retentionMS() int64 {
	if s.cfg.Retention < 0 {
		return -1
	}
	return s.cfg.Retention.Milliseconds()
}

// scriptCall is one script invocation, run alone or in a pipeline.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	// unconfirmed is why WAIT did not confirm a call that ran (runAcked
	// with WaitReplicas): its writes are on the master alone.
	unconfirmed error
}

// scripter is where scripts run: the store's client, or the client of one
// master when a WAIT must follow the writes in the same pipeline.
type scripter interface {
	Pipeline() redis.Pipeliner
	redis.Scripter
}

// runScripts runs calls in one pipeline (one round trip per node). Where
// Redis had not cached a script (NOSCRIPT after a restart or failover, or on
// a cluster node another client is still loading), it loads the script and
// runs again only the calls that answered NOSCRIPT: a call that did run must
// never run twice, or the reservations of its first run would be lost until
// their ttr. An error that hit every call is returned; otherwise each call's
// own error is in its cmd.
func (s *Store) runScripts(ctx context.Context, calls []*scriptCall) error {
	if err := s.execScripts(ctx, s.client, calls, nil); err != nil {
		return err
	}
	return allFailed(calls)
}

// execScripts runs calls on r as runScripts does, and leaves each call's
// outcome in its cmd; it fails only to load a script. After the calls, on
// the same connection, wait (when set) is queued, so that it covers their
// writes.
func (s *Store) execScripts(ctx context.Context, r scripter, calls []*scriptCall, wait func(redis.Pipeliner)) error {
	pending := calls
	for try := 0; len(pending) > 0 && try < 2; try++ {
		pipe := r.Pipeline()
		for _, c := range pending {
			c.cmd = evalSha(ctx, pipe, c)
		}
		if wait != nil {
			wait(pipe)
		}
		_, _ = s.exec(ctx, pipe)
		var noScript []*scriptCall
		for _, c := range pending {
			if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				noScript = append(noScript, c)
			}
		}
		if try > 0 {
			break
		}
		if err := loadScripts(ctx, r, noScript); err != nil {
			return err
		}
		pending = noScript
	}
	return nil
}

// exec runs pipe. On a Cluster, a master that refused the connection has
// died or moved: go-redis reloads its slot map after such a failure of a
// single command, but not of a pipeline, which every call of the store
// is, so without a reload here the shards of a master replaced by its
// replica would keep failing until the periodic reload, a minute later,
// their notifications starting that late. The reload runs in the
// background, at most every 200ms however many calls ask. A write Redis
// refused at maxmemory comes back marked with notify.ErrOutOfMemory, in
// its command and in the error.
func (s *Store) exec(ctx context.Context, pipe redis.Pipeliner) ([]redis.Cmder, error) {
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		if cc, ok := s.client.(*redis.ClusterClient); ok && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return misrouted(c.Err()) }) {
			cc.ReloadState(ctx)
		}
		for _, c := range cmds {
			if refusedFull(c.Err()) {
				c.SetErr(outOfMemory(c.Err()))
			}
		}
	}
	return cmds, outOfMemory(err)
}

// refusedFull reports whether err is Redis's refusal of a write at
// maxmemory, not yet marked with notify.ErrOutOfMemory.
func refusedFull(err error) bool {
	return redis.HasErrorPrefix(err, "OOM") && !errors.Is(err, notify.ErrOutOfMemory)
}

// outOfMemory marks Redis's refusal of a write at maxmemory with
// notify.ErrOutOfMemory, which a caller can tell from an outage; other errors
// come back as they are.
func outOfMemory(err error) error {
	if !refusedFull(err) {
		return err
	}
	return fmt.Errorf("%w: %w", notify.ErrOutOfMemory, err)
}

// allFailed returns the first call's error when every call failed, nil
// when one at least succeeded.
func allFailed(calls []*scriptCall) error {
	var firstErr error
	for _, c := range calls {
		err := c.cmd.Err()
		if err == nil || errors.Is(err, redis.Nil) {
			return nil
		}
		firstErr = cmp.Or(firstErr, err)
	}
	if firstErr != nil {
		return fmt.Errorf("run scripts: %w", firstErr)
	}
	return nil
}

// evalSha queues c on pipe as a command go-redis never sends a second time.
// Its own retries, after a read timeout or a connection closed before the
// reply, would run the script again when the first run's reply was only
// late or lost, and the second run's answer is not the first's: a
// reservation's items would be held until their ttr by a run no one heard
// from, an ack would answer that its receipt was stale.
// The error goes to the caller instead, which knows what retrying means.
func evalSha(ctx context.Context, pipe redis.Pipeliner, c *scriptCall) *redis.Cmd {
	argv := make([]any, 0, 3+len(c.keys)+len(c.args))
	argv = append(argv, "evalsha", c.script.Hash(), len(c.keys))
	for _, k := range c.keys {
		argv = append(argv, k)
	}
	cmd := redis.NewCmd(ctx, append(argv, c.args...)...)
	cmd.SetFirstKeyPos(3) // where a Cluster finds the slot
	_ = pipe.Process(ctx, noRetry{cmd})
	return cmd
}

// noRetry marks a command go-redis must not retry.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// loadScripts loads the scripts of calls, which answered NOSCRIPT, where r
// runs them: on a Cluster, on the master of each call's slot, as the
// client's slot map has it. A master not loaded here loads a script once it
// answers NOSCRIPT in turn. ForEachMaster would first read the slot map
// afresh from a node picked at random, replicas among them, and wait out
// the read timeout of one that hangs (its host stopped or cut off), which
// every script load after a failover or restart would risk. Should the
// map be out of date (a slot moved, the client's reload not done yet), the
// call answers NOSCRIPT again, and its caller tries it again as after any
// failure: it did not run.
func loadScripts(ctx context.Context, r scripter, calls []*scriptCall) error {
	type target struct {
		script *redis.Script
		node   string
	}
	loaded := map[target]bool{}
	for _, c := range calls {
		var node redis.Scripter = r
		t := target{script: c.script}
		if cc, ok := r.(*redis.ClusterClient); ok {
			master, err := cc.MasterForKey(ctx, c.keys[0])
			if err != nil {
				return fmt.Errorf("load script: %w", err)
			}
			node, t.node = master, master.Options().Addr
		}
		if !loaded[t] {
			loaded[t] = true
			if err := c.script.Load(ctx, node).Err(); err != nil {
				return fmt.Errorf("load script: %w", err)
			}
		}
	}
	return nil
}

// runAcked runs calls whose success is reported to someone (an enqueue,
// a cancel, a replay, a finish): with WaitReplicas set, each node's writes
// are followed on their own connection by WAIT, and fewer replicas than
// asked make the call notify.ErrNotReplicated; the writes are then on the
// master but may not survive its loss. Errors are otherwise as runScripts's.
func (s *Store) runAcked(ctx context.Context, calls []*scriptCall) error {
	n := s.cfg.WaitReplicas
	if n <= 0 {
		return s.runScripts(ctx, calls)
	}
	err := s.runWaited(ctx, calls, n)
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		// The slot map changed (a resharding moved a slot, a failover
		// promoted a replica), and the cluster client learns that from the
		// redirects and failures of its own calls, not from these, made on
		// one node's connection: it would send every acknowledged write of
		// the slot to the old master until its periodic reload, a minute
		// later. Such calls never ran: they go again, once, to the master
		// the map names now.
		if moved := slices.DeleteFunc(slices.Clone(calls), sentRight); len(moved) > 0 && reloadSlots(ctx, cc) == nil {
			err = cmp.Or(s.runWaited(ctx, moved, n), err)
		}
	}
	if ferr := allFailed(calls); ferr != nil {
		return ferr
	}
	return err
}

// sentRight reports whether c reached the master of its slot.
func sentRight(c *scriptCall) bool { return !misrouted(c.cmd.Err()) }

// misrouted reports whether err shows a command sent where its slot no
// longer lives, and never run: a redirect, or a master that refused the
// connection.
func misrouted(err error) bool {
	var dial *net.OpError
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") || (errors.As(err, &dial) && dial.Op == "dial")
}

// reloadSlots makes cc read the slot map afresh before it returns:
// ForEachMaster reloads it before visiting the masters, where ReloadState
// only asks for a reload in the background.
func reloadSlots(ctx context.Context, cc *redis.ClusterClient) error {
	return cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
}

// runWaited runs calls on the master of each, on one connection per master,
// where WAIT then waits for n replicas to have them. It returns an error for
// a master's WAIT that failed or fell short; each call's own error is in
// its cmd.
func (s *Store) runWaited(ctx context.Context, calls []*scriptCall, n int) error {
	groups := map[*redis.Client][]*scriptCall{}
	for _, call := range calls {
		node, err := s.masterOf(ctx, call.keys[0])
		if err != nil {
			call.cmd = redis.NewCmd(ctx)
			call.cmd.SetErr(err)
			continue
		}
		groups[node] = append(groups[node], call)
	}
	errs := make(chan error, len(groups))
	for node, group := range groups {
		go func() { errs <- s.runWaitedOn(ctx, node, group, n) }()
	}
	var err error
	for range groups {
		err = cmp.Or(err, <-errs)
	}
	return err
}

// runWaitedOn runs calls in a pipeline of node, then WAITs there for n
// replicas to have them: a pipeline runs on one connection, whose writes
// WAIT counts. (A Conn would do as well, but go-redis 9.23's shares its
// client's options without their lock, which a connection's first
// handshake writes: a data race whenever the two open connections at once,
// as after a failover.)
func (s *Store) runWaitedOn(ctx context.Context, node *redis.Client, calls []*scriptCall, n int) error {
	var acked *redis.Cmd
	err := s.execScripts(ctx, node, calls, func(pipe redis.Pipeliner) {
		acked = pipe.Do(ctx, "wait", n, s.cfg.WaitTimeout.Milliseconds())
	})
	if err != nil || allFailed(calls) != nil {
		return err // nothing written, nothing to wait for: the calls' errors say why
	}
	if err := s.replicated(acked, n); err != nil {
		for _, c := range calls {
			if c.cmd.Err() == nil {
				c.unconfirmed = err
			}
		}
		return err
	}
	return nil
}

// masterOf returns the client of the master that serves key: the store's
// own on a single Redis, where WAIT needs no more.
func (s *Store) masterOf(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("find the master of %s: %w", key, err)
		}
		return node, nil
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("redis.wait_replicas needs a standalone, Sentinel or Cluster client, not %T", s.client)
}

// replicated reads the reply of WAIT n: notify.ErrNotReplicated when fewer
// replicas than n had the writes before it.
func (s *Store) replicated(wait *redis.Cmd, n int) error {
	got, err := wait.Int()
	if err != nil {
		return fmt.Errorf("wait for replicas: %w", err)
	}
	if int(got) < n {
		return fmt.Errorf("%w: %d of %d replicas within %s", notify.ErrNotReplicated, got, n, s.cfg.WaitTimeout)
	}
	return nil
}

// runAckedCmds sends the plain commands queue adds, all of key's slot, in
// one pipeline: with WaitReplicas set, on one connection of key's master,
// followed there by WAIT, as runAcked does for scripts. It is for the
// writes an operator is answered about besides notifications (a pause, an
// endpoint, a sign-out), each a command or two that is safe to send again:
// on a Cluster whose slot map changed they go again, once, where the
// reloaded map says.
func (s *Store) runAckedCmds(ctx context.Context, key string, queue func(redis.Pipeliner)) error {
	n := s.cfg.WaitReplicas
	if n <= 0 {
		pipe := s.client.Pipeline()
		queue(pipe)
		_, err := s.exec(ctx, pipe)
		return err
	}
	err := s.sendWaited(ctx, key, queue, n)
	if cc, ok := s.client.(*redis.ClusterClient); ok && misrouted(err) && reloadSlots(ctx, cc) == nil {
		err = s.sendWaited(ctx, key, queue, n)
	}
	return err
}

// sendWaited sends queue's commands on one connection of key's master,
// then WAITs there for n replicas to have them.
func (s *Store) sendWaited(ctx context.Context, key string, queue func(redis.Pipeliner), n int) error {
	node, err := s.masterOf(ctx, key)
	if err != nil {
		return err
	}
	pipe := node.Pipeline()
	queue(pipe)
	wait := pipe.Do(ctx, "wait", n, s.cfg.WaitTimeout.Milliseconds())
	if _, err := s.exec(ctx, pipe); err != nil {
		return err
	}
	return s.replicated(wait, n)
}

// runScript runs one script and returns its reply.
func (s *Store) runScript(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	c := &scriptCall{script: sc, keys: keys, args: args}
	if err := s.runScripts(ctx, []*scriptCall{c}); err != nil {
		return nil, err
	}
	return c.cmd.Result()
}

// runAckedScript runs one script as runAcked does.
func (s *Store) runAckedScript(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	c := &scriptCall{script: sc, keys: keys, args: args}
	if err := s.runAcked(ctx, []*scriptCall{c}); err != nil {
		return nil, err
	}
	return c.cmd.Result()
}

// replyList checks that a script's reply is an array of at least n items.
func replyList(v any, n int) ([]any, error) {
	l, ok := v.([]any)
	if !ok || len(l) < n {
		return nil, fmt.Errorf("unexpected script reply %T", v)
	}
	return l, nil
}

func replyInt(v any) (int64, error) {
	i, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("unexpected script reply %T, want an integer", v)
	}
	return i, nil
}

func replyString(v any) string {
	s, _ := v.(string)
	return s
}

// replyCodes decodes the reply of a batch script: one result code per item,
// each an integer or an array whose first element is the code (and whose
// other elements, returned as details, say more).
func replyCodes(c *scriptCall, items int) ([]int, [][]any, error) {
	v, err := c.cmd.Result()
	if err != nil {
		return nil, nil, err
	}
	if code, ok := v.(int64); ok && items == 1 { // a script of one item answers its code alone
		return []int{int(code)}, [][]any{nil}, nil
	}
	l, err := replyList(v, items)
	if err != nil {
		return nil, nil, err
	}
	codes := make([]int, items)
	details := make([][]any, items)
	for i, e := range l[:items] {
		if sub, ok := e.([]any); ok && len(sub) > 0 {
			e, details[i] = sub[0], sub[1:]
		}
		code, err := replyInt(e)
		if err != nil {
			return nil, nil, err
		}
		codes[i] = int(code)
	}
	return codes, details, nil
}
