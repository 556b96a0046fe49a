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
