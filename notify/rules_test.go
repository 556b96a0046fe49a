package notify

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRulesRetries(t *testing.T) {
	t.Parallel()

	defaults := Rules{}
	for _, code := range []int{408, 425, 429, 500, 503, 599} {
		require.True(t, defaults.RetriesStatus(code), code)
	}
	for _, code := range []int{301, 400, 404, 410, 422} {
		require.False(t, defaults.RetriesStatus(code), code)
	}
	require.True(t, defaults.Retries("network"))
	require.True(t, defaults.Retries("timeout"))

	strict := Rules{RetryOn: []string{"3xx", "404"}}
	require.True(t, strict.RetriesStatus(302))
	require.True(t, strict.RetriesStatus(404))
	require.False(t, strict.RetriesStatus(503))
	require.False(t, strict.Retries("network"))

	none := Rules{RetryOn: []string{}}
	require.False(t, none.RetriesStatus(503), "an empty, non-nil list retries nothing")
}
