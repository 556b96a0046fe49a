package cli

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	t.Parallel()

	t.Run("Text", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"version"})
		require.NoError(t, r.err)
		require.Regexp(t, `^herald \S+ `+runtime.Version()+` `+runtime.GOOS+`/`+runtime.GOARCH+`( \(\w+\))?\n$`, r.out)
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"version", "--json"})
		require.NoError(t, r.err)
		var v versionInfo
		require.NoError(t, json.Unmarshal([]byte(r.out), &v))
		require.Equal(t, runtime.Version(), v.Go)
		require.NotEmpty(t, v.Version)
	})

	t.Run("NeedsNoConfig", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"--config", "/nonexistent/herald.yaml", "version"})
		require.NoError(t, r.err)
		require.Nil(t, r.base.Config)
	})

	t.Run("NoArguments", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"version", "now"})
		require.Equal(t, 2, r.code())
	})
}
