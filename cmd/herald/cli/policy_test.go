package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/policy"
)

const shippedPolicies = "../../../configs/policies.yaml"

// rows returns the whitespace-separated fields of each line of out, so
// tables can be compared without their padding.
func rows(out string) [][]string {
	var rs [][]string
	for line := range strings.Lines(out) {
		rs = append(rs, strings.Fields(line))
	}
	return rs
}

func TestPolicyCheck(t *testing.T) {
	t.Parallel()

	t.Run("Table", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"policy", "check", shippedPolicies})
		require.NoError(t, r.err)
		require.Contains(t, r.out, "policy default: 9 attempts, the last 24h22m after the first, then dead\n")
		require.Contains(t, r.out, "policy payment-poll: 7 attempts, the first 5s after the send time, the last 29m55s after the first, then dead\n")
		require.Contains(t, r.out, `success_body '{"code":"SUCCESS"}'`)

		// The default policy's table, as DESIGN.md works it out.
		start := strings.Index(r.out, "policy default:")
		table := rows(r.out[start:])[2:12]
		require.Equal(t, [][]string{
			{"ATTEMPT", "WAIT", "SINCE", "FIRST", "ATTEMPT"},
			{"0", "0s", "0s"},
			{"1", "0s", "0s"},
			{"2", "2m", "2m"},
			{"3", "10m", "12m"},
			{"4", "10m", "22m"},
			{"5", "1h", "1h22m"},
			{"6", "2h", "3h22m"},
			{"7", "6h", "9h22m"},
			{"8", "15h", "24h22m"},
		}, table)

		require.Contains(t, rows(r.out), []string{"payment-poll", "poll", "payment-poll", "-", "-"})
		require.True(t, strings.HasSuffix(r.out, shippedPolicies+": ok, 5 policies, 6 topics\n"))
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"policy", "check", "--json", shippedPolicies})
		require.NoError(t, r.err)
		var report struct {
			Policies []struct {
				Name        string   `json:"name"`
				Backoff     []string `json:"backoff"`
				SuccessBody string   `json:"success_body"`
				Schedule    []struct {
					Attempt    int    `json:"attempt"`
					Wait       string `json:"wait"`
					SinceFirst string `json:"since_first_attempt"`
				} `json:"schedule"`
			} `json:"policies"`
			Topics map[string]policy.Topic `json:"topics"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.out), &report))
		require.Len(t, report.Policies, 5)
		p := report.Policies[2]
		require.Equal(t, "default", p.Name)
		require.Len(t, p.Schedule, 9)
		require.Equal(t, "15h", p.Schedule[8].Wait)
		require.Equal(t, "24h22m", p.Schedule[8].SinceFirst)
		require.Equal(t, "success", report.Policies[0].SuccessBody)
		require.Equal(t, []string{"TRADE_SUCCESS", "TRADE_FINISHED", "TRADE_CLOSED"}, report.Topics["payment-poll"].Poll.Values)
	})

	// The file's targets and on_done URLs are the receivers', and their
	// credentials show as the API and the dashboard show a target's.
	t.Run("CredentialsHidden", func(t *testing.T) {
		t.Parallel()

		path := filepath.Join(t.TempDir(), "policies.yaml")
		require.NoError(t, os.WriteFile(path, []byte(`topics:
  order-notify: {channel: webhook, target: 'https://merchant:TargetPassw0rd@merchant.example/notify?access_token=TargetTok3n'}
  trade-poll:
    channel: poll
    target: 'https://provider.example/query?sig=PollSig'
    poll: {field: status, values: [done], on_done: 'https://hook:OnDonePassw0rd@hooks.example/done'}
`), 0o600))
		secrets := []string{"TargetPassw0rd", "TargetTok3n", "PollSig", "OnDonePassw0rd"}

		r := run(t, []string{"policy", "check", path})
		require.NoError(t, r.err)
		require.Contains(t, rows(r.out), []string{"order-notify", "webhook", "-", "-", "https://xxxxx@merchant.example/notify?access_token=xxxxx"})
		require.Contains(t, rows(r.out), []string{"trade-poll", "poll", "-", "-", "https://provider.example/query?sig=xxxxx"})
		for _, secret := range secrets {
			require.NotContains(t, r.out, secret)
		}

		r = run(t, []string{"policy", "check", "--json", path})
		require.NoError(t, r.err)
		var report struct {
			Topics map[string]policy.Topic `json:"topics"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.out), &report))
		require.Equal(t, "https://xxxxx@merchant.example/notify?access_token=xxxxx", report.Topics["order-notify"].Target)
		require.Equal(t, "https://provider.example/query?sig=xxxxx", report.Topics["trade-poll"].Target)
		require.Equal(t, "https://xxxxx@hooks.example/done", report.Topics["trade-poll"].Poll.OnDone)
		for _, secret := range secrets {
			require.NotContains(t, r.out, secret)
		}
	})

	t.Run("BadOnDoneHidesCredentials", func(t *testing.T) {
		t.Parallel()

		path := filepath.Join(t.TempDir(), "policies.yaml")
		require.NoError(t, os.WriteFile(path, []byte(
			"topics:\n  t: {channel: poll, poll: {field: f, values: [x], on_done: 'ftp://hook:OnDonePassw0rd@hooks.example/done'}}\n"), 0o600))
		r := run(t, []string{"policy", "check", path})
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, path+`: topics.t.poll.on_done: must be an http or https URL with a host, not "ftp://xxxxx@hooks.example/done"`)
		require.NotContains(t, r.err.Error()+r.out+r.logs, "OnDonePassw0rd")
	})

	t.Run("BadFile", func(t *testing.T) {
		t.Parallel()

		path := filepath.Join(t.TempDir(), "policies.yaml")
		require.NoError(t, os.WriteFile(path, []byte("policies:\n  merchant-notify:\n    backoff: [0s, 0s, 2mins]\n"), 0o600))
		r := run(t, []string{"policy", "check", path})
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, path+": policies.merchant-notify.backoff[2]: ")
		require.Empty(t, r.out)
	})

	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"policy", "check", filepath.Join(t.TempDir(), "nope.yaml")})
		require.Equal(t, 2, r.code())
	})

	t.Run("NoFile", func(t *testing.T) {
		t.Parallel()

		r := run(t, []string{"policy", "check"})
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "accepts 1 arg")
	})
}

func TestStartPolicies(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	path := filepath.Join(dir, "policies.yaml")
	mtime := time.Now().Add(-time.Hour)
	write := func(content string) {
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		// Keep the modification time, so only SIGHUP can notice.
		require.NoError(t, os.Chtimes(path, mtime, mtime))
	}
	write("policies:\n  p: {backoff: [0s, 1m]}\n")
	cfgPath := writeConfig(t, "policies_file: "+path+"\n")

	started := make(chan *policy.Watcher)
	release := make(chan struct{})
	watch := func(c *app) *cobra.Command {
		return withConfig(&cobra.Command{
			Use: "watch",
			RunE: func(cmd *cobra.Command, _ []string) error {
				w, stop, err := c.base.StartPolicies(cmd.Context(), nil)
				if err != nil {
					return err
				}
				defer stop()
				started <- w
				<-release
				return nil
			},
		})
	}

	done := make(chan *result)
	go func() { done <- run(t, []string{"--config", cfgPath, "watch"}, watch) }()
	w := <-started
	require.Equal(t, "1m", w.Current().Policies["p"].Backoff[1].String())

	write("policies:\n  p: {backoff: [0s, 2m]}\n")
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	require.NoError(t, self.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		return w.Current().Policies["p"].Backoff[1].String() == "2m"
	}, 10*time.Second, 5*time.Millisecond)

	close(release)
	r := <-done
	require.NoError(t, r.err)

	t.Run("BadFileIsAUsageError", func(t *testing.T) {
		t.Parallel()

		bad := filepath.Join(t.TempDir(), "policies.yaml")
		require.NoError(t, os.WriteFile(bad, []byte("policies:\n  p: {backoff: [0s, 1 minute]}\n"), 0o600))
		r := run(t, []string{"--config", writeConfig(t, "policies_file: "+bad+"\n"), "watch"}, watch)
		require.Equal(t, 2, r.code())
		require.ErrorContains(t, r.err, "policies.p.backoff[1]")
	})
}

// TestRelativePathsNotFound runs commands whose policies_file or
// templates_dir, relative, is not found: the error says that such paths
// are taken from the working directory, and which that is, since an
// operator who keeps herald.yaml in /etc/herald looks for them beside it.
func TestRelativePathsNotFound(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	require.NoError(t, err)
	e := newEnv(t, "")
	cfg := readFile(t, e.config)
	noPolicies := writeConfig(t, regexp.MustCompile(`(?m)^policies_file: .*$`).ReplaceAllString(cfg, "policies_file: policies.yaml"))
	noTemplates := writeConfig(t, regexp.MustCompile(`(?m)^templates_dir: .*$`).ReplaceAllString(cfg, "templates_dir: templates"))

	for _, tc := range []struct {
		name, config string
		args         []string
		want         string
	}{
		{name: "PoliciesEnqueue", config: noPolicies, args: []string{"enqueue", "--topic", "jobs"}, want: "policies_file"},
		{name: "PoliciesServe", config: noPolicies, args: []string{"serve"}, want: "policies_file"},
		{name: "TemplatesServe", config: noTemplates, args: []string{"serve"}, want: "templates_dir"},
		{name: "TemplatesEnqueue", config: noTemplates, args: []string{"enqueue", "--topic", "merchant-notify",
			"--target", "https://merchant.example/notify", "--template", "order-notify.json"}, want: "templates_dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, append([]string{"--config", tc.config}, tc.args...))
			require.Equal(t, 2, r.code(), r.err)
			require.ErrorIs(t, r.err, os.ErrNotExist)
			require.ErrorContains(t, r.err, tc.want+" is relative to the working directory, "+wd)
		})
	}
}
