package policy

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

// reloadResult is one call of WatcherConfig.ReloadedFunc.
type reloadResult struct {
	set *Set
	err error
}

// lockedBuffer is a log destination the watcher's goroutine and the test
// can share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestWatcher(t *testing.T) {
	t.Parallel()

	const (
		goodYAML  = "policies:\n  p: {backoff: [0s, 1m]}\n"
		goodYAML2 = "policies:\n  p: {backoff: [0s, 1m, 5m]}\n  q: {backoff: [0s]}\n"
		badYAML   = "policies:\n  p: {backoff: [0s, 1 minute]}\n"
	)

	type testBundle struct {
		path     string
		logs     *lockedBuffer
		reloaded chan reloadResult
		mtime    time.Time
	}

	setup := func(t *testing.T) (*Watcher, *testBundle) {
		t.Helper()

		bundle := &testBundle{
			path:     filepath.Join(t.TempDir(), "policies.yaml"),
			logs:     &lockedBuffer{},
			reloaded: make(chan reloadResult, 10),
			mtime:    time.Now().Add(-time.Hour),
		}
		require.NoError(t, os.WriteFile(bundle.path, []byte(goodYAML), 0o600))
		require.NoError(t, os.Chtimes(bundle.path, bundle.mtime, bundle.mtime))
		w, err := NewWatcher(&WatcherConfig{
			Path:         bundle.path,
			Interval:     5 * time.Millisecond,
			Logger:       slog.New(slog.NewTextHandler(bundle.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			ReloadedFunc: func(s *Set, err error) { bundle.reloaded <- reloadResult{s, err} },
		})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		return w, bundle
	}

	// write replaces the file as configuration managers do, by renaming a
	// finished file over it, with a modification time a whole second
	// later, so the change is seen whatever the file system's timestamp
	// resolution.
	write := func(t *testing.T, bundle *testBundle, content string) {
		t.Helper()
		tmp := bundle.path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
		bundle.mtime = bundle.mtime.Add(time.Second)
		require.NoError(t, os.Chtimes(tmp, bundle.mtime, bundle.mtime))
		require.NoError(t, os.Rename(tmp, bundle.path))
	}

	// waitReload returns the first reload that failed (wantErr) or
	// succeeded (!wantErr), skipping others.
	waitReload := func(t *testing.T, bundle *testBundle, wantErr bool) reloadResult {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case r := <-bundle.reloaded:
				if (r.err != nil) == wantErr {
					return r
				}
			case <-deadline:
				require.FailNow(t, "no such reload within 10s")
			}
		}
	}

	t.Run("LoadsAtConstruction", func(t *testing.T) {
		t.Parallel()

		w, _ := setup(t)
		require.Len(t, w.Current().Policies["p"].Backoff, 2)
	})

	t.Run("RefusesBadFileAtConstruction", func(t *testing.T) {
		t.Parallel()

		path := filepath.Join(t.TempDir(), "policies.yaml")
		require.NoError(t, os.WriteFile(path, []byte(badYAML), 0o600))
		_, err := NewWatcher(&WatcherConfig{Path: path})
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "policies.p.backoff[1]", fe.Field)
	})

	t.Run("AppliesGoodChange", func(t *testing.T) {
		t.Parallel()

		w, bundle := setup(t)
		w.Start(t.Context())
		write(t, bundle, goodYAML2)

		r := waitReload(t, bundle, false)
		require.Same(t, r.set, w.Current())
		require.Len(t, w.Current().Policies["p"].Backoff, 3)
		require.Contains(t, w.Current().Policies, "q")
		require.Contains(t, bundle.logs.String(), "reloaded the policies file")
	})

	t.Run("RefusesBadChangeAndKeepsOld", func(t *testing.T) {
		t.Parallel()

		w, bundle := setup(t)
		before := w.Current()
		w.Start(t.Context())
		write(t, bundle, badYAML)

		r := waitReload(t, bundle, true)
		var fe *notify.FieldError
		require.ErrorAs(t, r.err, &fe)
		require.Equal(t, "policies.p.backoff[1]", fe.Field)
		require.Same(t, before, w.Current())
		require.Same(t, before, r.set)
		require.Contains(t, bundle.logs.String(), "field=policies.p.backoff[1]")

		// The bad file is not read again until it changes; fixing it
		// applies the fix.
		write(t, bundle, goodYAML2)
		waitReload(t, bundle, false)
		require.Len(t, w.Current().Policies["p"].Backoff, 3)
	})

	t.Run("MissingFileKeepsOld", func(t *testing.T) {
		t.Parallel()

		w, bundle := setup(t)
		before := w.Current()
		require.NoError(t, os.Remove(bundle.path))
		w.Start(t.Context())

		require.Eventually(t, func() bool {
			return bytes.Contains([]byte(bundle.logs.String()), []byte("cannot look at the policies file"))
		}, 10*time.Second, 5*time.Millisecond)
		require.Same(t, before, w.Current())

		write(t, bundle, goodYAML2)
		waitReload(t, bundle, false)
	})

	t.Run("ReadsOnlySettledChanges", func(t *testing.T) {
		t.Parallel()

		// Not started: the test makes each check itself.
		w, bundle := setup(t)
		before := w.Current()

		// Truncated, as by a write in place: valid YAML, but not yet the
		// file. A check notices it and waits.
		write(t, bundle, "")
		w.check(t.Context())
		require.Same(t, before, w.Current())

		// Filled in before the next check: still moving, so it waits.
		write(t, bundle, goodYAML2)
		w.check(t.Context())
		require.Same(t, before, w.Current())
		require.Empty(t, bundle.reloaded)

		// Unchanged since the last check: read.
		w.check(t.Context())
		require.NoError(t, waitReload(t, bundle, false).err)
		require.Len(t, w.Current().Policies["p"].Backoff, 3)

		// Nothing new: nothing read.
		w.check(t.Context())
		require.Empty(t, bundle.reloaded)
	})

	t.Run("ReloadOnRequest", func(t *testing.T) {
		t.Parallel()

		// Not started: only Reload reads the file.
		w, bundle := setup(t)
		before := w.Current()
		write(t, bundle, badYAML)
		var fe *notify.FieldError
		require.ErrorAs(t, w.Reload(t.Context()), &fe)
		require.Same(t, before, w.Current())
		waitReload(t, bundle, true)

		write(t, bundle, goodYAML2)
		require.NoError(t, w.Reload(t.Context()))
		require.Len(t, w.Current().Policies["p"].Backoff, 3)
		waitReload(t, bundle, false)
	})

	t.Run("StartStop", func(t *testing.T) {
		t.Parallel()

		w, _ := setup(t)
		w.Stop() // before Start: nothing to do
		w.Start(t.Context())
		w.Start(t.Context()) // already started: nothing to do
		w.Stop()
		w.Stop()
		w.Start(t.Context()) // restartable; Cleanup stops it
	})

	t.Run("StopsWithContext", func(t *testing.T) {
		t.Parallel()

		w, _ := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		w.Start(ctx)
		cancel()
		w.Stop()
	})
}

func TestWatcherReloadSignals(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "policies.yaml")
	mtime := time.Now().Add(-time.Hour)
	write := func(content string) {
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		// Same size, same modification time: only the signal can notice.
		require.NoError(t, os.Chtimes(path, mtime, mtime))
	}
	write("policies:\n  p: {backoff: [0s, 1m]}\n")
	w, err := NewWatcher(&WatcherConfig{Path: path, Interval: time.Hour, ReloadSignals: []os.Signal{syscall.SIGUSR1}})
	require.NoError(t, err)
	w.Start(context.Background())
	defer w.Stop()

	write("policies:\n  p: {backoff: [0s, 2m]}\n")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
	require.Eventually(t, func() bool {
		return w.Current().Policies["p"].Backoff[1].String() == "2m"
	}, 10*time.Second, 5*time.Millisecond)
}

// TestWatcherSignalDuringWrite sends the reload signal while the policies
// file is being written in place (truncated, then filled), as an editor or
// a deploy script does: the half-written file is not installed, even an
// empty one, which is valid YAML for no topics at all and would refuse
// every enqueue naming one; the new file is, once it has held for an
// interval. An empty file is refused wherever it is loaded.
func TestWatcherSignalDuringWrite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.WriteFile(path, []byte("topics:\n  a: {channel: pull}\n  b: {channel: pull}\n"), 0o600))
	require.NoError(t, os.Chtimes(path, old, old))
	var mu sync.Mutex
	var installed []*Set
	logs := &lockedBuffer{}
	w, err := NewWatcher(&WatcherConfig{Path: path, Interval: 100 * time.Millisecond,
		ReloadSignals: []os.Signal{syscall.SIGUSR2},
		Logger:        slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ReloadedFunc: func(s *Set, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				installed = append(installed, s)
			}
		}})
	require.NoError(t, err)
	w.Start(context.Background())
	defer w.Stop()

	require.NoError(t, os.Truncate(path, 0))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR2))
	require.Eventually(t, func() bool { return bytes.Contains([]byte(logs.String()), []byte("user defined signal 2")) },
		10*time.Second, 5*time.Millisecond, "the signal was not heard")
	require.NoError(t, os.WriteFile(path, []byte("topics:\n  a: {channel: pull}\n  b: {channel: pull}\n  c: {channel: pull}\n"), 0o600))
	require.Eventually(t, func() bool { _, ok := w.Current().Topics["c"]; return ok }, 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, s := range installed {
		require.Len(t, s.Topics, 3, "a half-written file was installed")
	}

	empty := filepath.Join(t.TempDir(), "empty.yaml")
	for _, text := range []string{"\n# nothing yet\n", "policies:\n", "policies:\ntopics:\n"} {
		require.NoError(t, os.WriteFile(empty, []byte(text), 0o600))
		_, err = Load(empty)
		require.ErrorContains(t, err, "empty", "%q", text)
	}
	require.NoError(t, os.WriteFile(empty, []byte("policies: {}\n"), 0o600))
	_, err = Load(empty)
	require.NoError(t, err, "the default policy alone, as the message says")
}
