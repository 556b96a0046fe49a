package api

import (
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

// lockedLines keeps the lines of a logger its timer writes to as well.
type lockedLines struct {
	tb    testing.TB
	mu    sync.Mutex
	lines []string
}

func (l *lockedLines) Write(p []byte) (int, error) {
	l.tb.Log(string(p))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *lockedLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// TestRefusalLogSummarisesOnItsOwn: refusals after the first are summarised
// once the interval has passed even when no request follows them, and the
// first refusal after a quiet interval is logged in full again, so an
// operator sees both a new run of refusals and how many each run had.
func TestRefusalLogSummarisesOnItsOwn(t *testing.T) {
	t.Parallel()
	out := &lockedLines{tb: t}
	const every = time.Second
	l := &refusalLog{log: slog.New(slog.NewTextHandler(out, nil)), every: every}
	r := httptest.NewRequest("POST", "/v1/notifications", nil)
	for range 100 {
		l.refused(r, notify.ErrOutOfMemory)
	}
	lines := out.all()
	require.Len(t, lines, 1, "the first refusal at once, the others waiting for the summary")
	require.Contains(t, lines[0], "path=/v1/notifications")

	require.Eventually(t, func() bool { return len(out.all()) == 2 }, 10*time.Second, 10*time.Millisecond)
	summarised := time.Now()
	require.Contains(t, out.all()[1], "refused=99")

	require.Eventually(t, func() bool { return time.Since(summarised) > every }, 10*time.Second, 10*time.Millisecond)
	l.refused(r, notify.ErrOutOfMemory)
	lines = out.all()
	require.Len(t, lines, 3)
	require.Contains(t, lines[2], "path=/v1/notifications", "a new run begins with a full line")

	l.close()
	require.Len(t, out.all(), 3, "nothing pending")
	l.refused(r, notify.ErrOutOfMemory)
	lines = out.all()
	require.Len(t, lines, 4)
	require.True(t, strings.Contains(lines[3], "path=/v1/notifications"), "after close, each in full")
}

// TestRefusalLogCountsEveryRefusalConcurrently: refusals from many
// requests at once, with summaries falling due while they come and the
// log closed right after, are each in exactly one line: logged in full or
// counted in one summary, none lost and none counted twice.
func TestRefusalLogCountsEveryRefusalConcurrently(t *testing.T) {
	t.Parallel()
	out := &lockedLines{tb: discardTB{t}}
	l := &refusalLog{log: slog.New(slog.NewTextHandler(out, nil)), every: time.Millisecond}
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			r := httptest.NewRequest("POST", "/v1/notifications", nil)
			for range each {
				l.refused(r, notify.ErrOutOfMemory)
			}
		})
	}
	wg.Wait()
	l.close()
	lines := out.all()
	summary := regexp.MustCompile(`refused=(\d+)`)
	total := 0
	for _, line := range lines {
		if m := summary.FindStringSubmatch(line); m != nil {
			n, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			total += n
			continue
		}
		require.True(t, strings.Contains(line, "path=/v1/notifications"), line)
		total++
	}
	require.Equal(t, workers*each, total)
	require.Less(t, len(lines), workers*each, "refusals were summarised")
}

// discardTB keeps a test's log short: thousands of lines are counted, not
// shown.
type discardTB struct{ testing.TB }

func (discardTB) Log(...any) {}
