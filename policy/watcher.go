package policy

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/notify"
)

// WatchIntervalDefault is how often a Watcher looks at its file.
const WatchIntervalDefault = 2 * time.Second

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Path is the policies file. Required.
	Path string
	// Interval is how often the file's modification time and size are
	// checked; the file is read again when one of them changed and then
	// held until the next check. Default WatchIntervalDefault (2s).
	Interval time.Duration
	// Logger receives a line for every reload, applied or refused. Default:
	// a warn-level text handler on stderr.
	Logger *slog.Logger
	// ReloadedFunc, when set, is called after every reload attempt with the
	// set now in force and the error that refused the file (nil when the
	// file was applied), for metrics or tests. It runs while the Watcher
	// holds its reload lock, so it must not call Reload.
	ReloadedFunc func(current *Set, err error)
	// ReloadSignals, when set, make the running Watcher reload the file
	// whenever the process receives one of them, as Reload does, but for a
	// file changed less than Interval ago, which is read once it has held
	// for an interval: herald serve passes SIGHUP. They are caught from
	// Start until Stop.
	ReloadSignals []os.Signal
}

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c *WatcherConfig) withDefaults() *WatcherConfig {
	out := *c
	if out.Interval <= 0 {
		out.Interval = WatchIntervalDefault
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return &out
}

// Watcher holds the policy Set in force and replaces it when the policies
// file changes (checked by polling, which also sees files replaced by a
// rename or a symlink swap, as configuration managers do; a change is read
// once it has held for one interval), when Reload is called, or when one of
// its ReloadSignals arrives. A file that does not load is refused with its field
// path, logged, and the previous Set stays in force, so a typo never takes
// the policies away from a running dispatcher.
type Watcher struct {
	config  *WatcherConfig
	current atomic.Pointer[Set]

	// mu serialises reloads, so a poll and a SIGHUP never race to install
	// different reads of the file, and guards seen and statErr.
	mu sync.Mutex
	// seen is the file's stamp at the last read, good or bad: a refused
	// file is not read and logged again until it changes.
	seen fileStamp
	// pending is a new stamp seen at the last check. The file is read only
	// when the next check finds it unchanged, so a file being written in
	// place (truncated, then filled) is not read half-written: a truncated
	// policies file can be valid YAML that drops topics.
	pending fileStamp
	// statErr is the last error from looking at the file, logged once
	// rather than on every tick while the file is missing.
	statErr string

	// lifeMu guards cancel and done, which are set while the loop runs.
	lifeMu sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewWatcher loads config.Path and returns a Watcher holding it. A file
// that does not load is an error here: there is no previous Set to keep.
func NewWatcher(config *WatcherConfig) (*Watcher, error) {
	w := &Watcher{config: config.withDefaults()}
	w.seen, _ = stat(w.config.Path)
	s, err := Load(w.config.Path)
	if err != nil {
		return nil, err
	}
	w.current.Store(s)
	return w, nil
}

// Current returns the Set in force. It never returns nil, and the Set it
// returns is never modified: hold on to it for the length of one decision
// (resolving one request), then ask again.
func (w *Watcher) Current() *Set { return w.current.Load() }

// Reload reads the file now, whether or not it looks changed, and installs
// it. On error the previous Set stays in force and the error, which wraps
// a *notify.FieldError for a bad value, is returned as well as logged.
func (w *Watcher) Reload(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reload(ctx, "requested")
}

// Start launches the loop that watches the file and returns at once. It
// runs until ctx ends or Stop is called. Starting a started Watcher does
// nothing.
func (w *Watcher) Start(ctx context.Context) {
	w.lifeMu.Lock()
	defer w.lifeMu.Unlock()
	if w.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	w.cancel, w.done = cancel, done
	// Caught before Start returns, so a signal sent right after it cannot
	// take its default action (SIGHUP's ends the process).
	sig := make(chan os.Signal, 1)
	if len(w.config.ReloadSignals) > 0 {
		signal.Notify(sig, w.config.ReloadSignals...)
	}
	go func() {
		defer close(done)
		defer signal.Stop(sig)
		w.run(ctx, sig)
	}()
}

// Stop ends the loop and waits for it to return. Stopping a Watcher that
// is not running does nothing, so a deferred Stop is always safe.
func (w *Watcher) Stop() {
	w.lifeMu.Lock()
	defer w.lifeMu.Unlock()
	if w.done == nil {
		return
	}
	w.cancel()
	<-w.done
	w.cancel, w.done = nil, nil
}

func (w *Watcher) run(ctx context.Context, sig <-chan os.Signal) {
	ticker := time.NewTicker(w.config.Interval)
	defer ticker.Stop()
	for {
		w.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case s := <-sig:
			w.signalled(ctx, s.String())
		}
	}
}

// signalled reloads the file for a signal, as Reload does, unless it
// changed less than an interval ago: it may be being written in place, as
// an editor or a deploy script does, and half of it can be valid YAML that
// drops topics. The poll then reads it once it has held for an interval.
func (w *Watcher) signalled(ctx context.Context, reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	stamp, err := stat(w.config.Path)
	if err == nil && time.Since(time.Unix(0, stamp.modTime)) < w.config.Interval {
		w.seen = fileStamp{} // makes the poll read it, however it was read before
		w.config.Logger.InfoContext(ctx, "policy.Watcher: the policies file changed moments ago; reading it once it has held for an interval",
			slog.String("path", w.config.Path), slog.String("reason", reason), slog.Duration("interval", w.config.Interval))
		return
	}
	_ = w.reload(ctx, reason) // logged and reported by reload
}

// check reloads the file when its stamp differs from the one last read
// and has stayed the same since the previous check.
func (w *Watcher) check(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	stamp, err := stat(w.config.Path)
	if err != nil {
		if err.Error() != w.statErr {
			w.statErr = err.Error()
			w.config.Logger.WarnContext(ctx, "policy.Watcher: cannot look at the policies file, keeping the current policies",
				slog.String("path", w.config.Path), slog.String("error", w.statErr))
		}
		return
	}
	w.statErr = ""
	switch {
	case stamp == w.seen:
	case stamp != w.pending:
		w.pending = stamp // still being written, perhaps: look again next tick
	default:
		_ = w.reload(ctx, "file changed") // logged and reported by reload
	}
}

// reload reads and installs the file; w.mu must be held.
func (w *Watcher) reload(ctx context.Context, reason string) error {
	// Stat before reading: if the file changes in between, the next check
	// sees a newer stamp and reads it again.
	if stamp, err := stat(w.config.Path); err == nil {
		w.seen = stamp
	}
	s, err := Load(w.config.Path)
	if err != nil {
		attrs := []any{slog.String("path", w.config.Path), slog.String("reason", reason), slog.String("error", err.Error())}
		var fe *notify.FieldError
		if errors.As(err, &fe) {
			attrs = append(attrs, slog.String("field", fe.Field))
		}
		w.config.Logger.ErrorContext(ctx, "policy.Watcher: refused the policies file, keeping the previous policies", attrs...)
		if w.config.ReloadedFunc != nil {
			w.config.ReloadedFunc(w.Current(), err)
		}
		return err
	}
	w.current.Store(s)
	w.config.Logger.InfoContext(ctx, "policy.Watcher: reloaded the policies file",
		slog.String("path", w.config.Path), slog.String("reason", reason),
		slog.Int("policies", len(s.Policies)), slog.Int("topics", len(s.Topics)))
	if w.config.ReloadedFunc != nil {
		w.config.ReloadedFunc(s, nil)
	}
	return nil
}

// fileStamp is what the poll compares to decide a file changed.
type fileStamp struct {
	modTime int64 // Unix nanoseconds
	size    int64
}

func stat(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{modTime: fi.ModTime().UnixNano(), size: fi.Size()}, nil
}
