package demo_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/cmd/herald/cli"
	"github.com/heraldhq/herald/internal/redistest"
)

func TestMain(m *testing.M) { redistest.VerifyMain(m) }

// TestChangesComeBeforeTheReminders runs herald demo at the fastest speed
// --speed allows: the appointment service still moves one reminder and
// cancels the other before either is due, so the cancelled appointment's
// text never goes out and the demo ends as it says it does, however fast
// it plays and however slow the machine.
func TestChangesComeBeforeTheReminders(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	config := filepath.Join(t.TempDir(), "herald.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `redis: {addrs: []}
namespace: herald-demo
api: {listen: "127.0.0.1:0"}
senders:
  webhook: {secret: whsec_ZGVtby10ZXN0LXNpZ25pbmcta2V5LWZvci10aGUtZGVtbw==, allow_networks: ["127.0.0.0/8"]}
policies_file: %s
templates_dir: %s
log: {level: warn}
`, filepath.Join(root, "configs", "demo-policies.yaml"), filepath.Join(root, "templates")), 0o600))

	var out, logs bytes.Buffer
	err = cli.Execute(t.Context(), cli.Deps{Out: &out, Err: &logs}, []string{"--config", config, "demo", "--speed", "100"})
	require.NoError(t, err, out.String()+logs.String())
	require.Contains(t, out.String(), "demo-reminder-43 cancelled: the appointment is cancelled")
	require.NotContains(t, out.String(), "text to +14155550143", "the cancelled appointment's reminder went out")
	require.Regexp(t, regexp.MustCompile(`(?m)^demo-reminder-42\s+appointment-reminder\s+sms\s+succeeded\s+1\s+moved before it was due`), out.String())
	require.Regexp(t, regexp.MustCompile(`(?m)^demo-reminder-43\s+appointment-reminder\s+sms\s+cancelled\s+0\s+cancelled before it was due`), out.String())
}
