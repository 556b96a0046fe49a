package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

func TestParse(t *testing.T) {
	t.Parallel()

	t.Run("DurationForms", func(t *testing.T) {
		t.Parallel()

		s, err := parse([]byte(`
policies:
  p:
    backoff: [0s, 30, 1.5, "45", 2m]
    ttr: 60
    max_retry_after: 1h30m
    retry_on: [network, 5xx, 429]
    jitter: 0
`))
		require.NoError(t, err)
		p := s.Policies["p"]
		require.Equal(t, []notify.Duration{0, notify.Duration(30 * time.Second), notify.Duration(1500 * time.Millisecond), notify.Duration(45 * time.Second), notify.Duration(2 * time.Minute)}, p.Backoff)
		require.Equal(t, notify.Duration(time.Minute), p.TTR)
		require.Equal(t, notify.Duration(90*time.Minute), p.MaxRetryAfter)
		require.Equal(t, []string{"network", "5xx", "429"}, p.RetryOn)
		require.Equal(t, notify.Duration(TimeoutDefault), p.Timeout, "defaults applied")
		require.Contains(t, s.Policies, DefaultName, "default added")
	})

	t.Run("DottedNames", func(t *testing.T) {
		t.Parallel()

		s, err := parse([]byte(`
policies:
  merchant.v2: {backoff: [0s, 1m]}
topics:
  order.notify: {channel: webhook, policy: merchant.v2}
`))
		require.NoError(t, err)
		require.Contains(t, s.Policies, "merchant.v2")
		require.Equal(t, "merchant.v2", s.Topics["order.notify"].Policy)
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()

		s, err := parse(nil)
		require.NoError(t, err)
		require.Equal(t, BackoffDefault, s.Policies[DefaultName].Backoff)
		require.Empty(t, s.Topics)
	})

	t.Run("Poll", func(t *testing.T) {
		t.Parallel()

		s, err := parse([]byte(`
topics:
  payment-poll:
    channel: poll
    poll: {field: trade_status, values: [TRADE_SUCCESS, TRADE_CLOSED], method: POST}
`))
		require.NoError(t, err)
		require.Equal(t, &Poll{Method: "POST", Field: "trade_status", Values: []string{"TRADE_SUCCESS", "TRADE_CLOSED"}}, s.Topics["payment-poll"].Poll)
	})
}

func TestParseErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		yaml      string
		wantField string
		wantMsg   string
		// hidden is a value the error must not echo.
		hidden string
	}{
		{
			name:      "BadDuration",
			yaml:      "policies:\n  merchant-notify:\n    backoff: [0s, 0s, 2mins]\n",
			wantField: "policies.merchant-notify.backoff[2]",
			wantMsg:   `bad duration "2mins"`,
		},
		{
			name:      "NegativeSeconds",
			yaml:      "policies:\n  p:\n    backoff: [0s, -5]\n",
			wantField: "policies.p.backoff[1]",
			wantMsg:   "negative",
		},
		{
			name:      "DurationOfWrongType",
			yaml:      "policies:\n  p:\n    backoff: [0s]\n    ttr: true\n",
			wantField: "policies.p.ttr",
			wantMsg:   "want a duration",
		},
		{
			// Not Go's reference layout, which reads as a time the
			// operator did not write.
			name:      "SecretExpiryNotATime",
			yaml:      "policies:\n  p:\n    backoff: [0s]\nendpoints:\n  m:\n    url: https://m.example/n\n    secrets: [{value: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, expires_at: tomorrow}]\n",
			wantField: "endpoints.m.secrets[0].expires_at",
			wantMsg:   "want an RFC 3339 time such as 2026-12-01T00:00:00Z",
		},
		{
			name:      "UnknownTopLevelKey",
			yaml:      "policies: {}\npolicy: {}\n",
			wantField: "policy",
			wantMsg:   "unknown key",
		},
		{
			name:      "UnknownPolicyKey",
			yaml:      "policies:\n  p:\n    backoff: [0s]\n    retries: 3\n",
			wantField: "policies.p.retries",
			wantMsg:   "unknown key",
		},
		{
			name:      "UnknownPollKey",
			yaml:      "topics:\n  t:\n    channel: poll\n    poll: {field: f, values: [x], done: y}\n",
			wantField: "topics.t.poll.done",
			wantMsg:   "unknown key",
		},
		{
			name:      "PolicyNotAMap",
			yaml:      "policies:\n  p: 5m\n",
			wantField: "policies.p",
			wantMsg:   "want a map, not a string",
		},
		{
			name:      "PoliciesNotAMap",
			yaml:      "policies: [a, b]\n",
			wantField: "policies[0]",
			wantMsg:   "want a map, not a string",
		},
		{
			name:      "BadJitter",
			yaml:      "policies:\n  p: {backoff: [0s], jitter: lots}\n",
			wantField: "policies.p.jitter",
			wantMsg:   "want a number, not a string that does not read as one",
			hidden:    "lots",
		},
		{
			name:      "ListForString",
			yaml:      "policies:\n  p: {backoff: [0s], success_body: [a, b]}\n",
			wantField: "policies.p.success_body",
			wantMsg:   "want a string, not a list",
		},
		{
			name:      "SecretValueAsList",
			yaml:      "endpoints:\n  m:\n    url: https://m.example/\n    secrets: [{value: [whsec_c2VjcmV0LWtleS0wMTIzNDU2Nzg5]}]\n",
			wantField: "endpoints.m.secrets[0].value",
			wantMsg:   "want a string, not a list",
			hidden:    "c2VjcmV0",
		},
		{
			name:      "SecretsAsString",
			yaml:      "endpoints:\n  m:\n    url: https://m.example/\n    secrets: whsec_c2VjcmV0LWtleS0wMTIzNDU2Nzg5\n",
			wantField: "endpoints.m.secrets[0]",
			wantMsg:   "want a map, not a string",
			hidden:    "c2VjcmV0",
		},
		{
			name:      "ValidationAfterDecoding",
			yaml:      "policies:\n  p: {backoff: [0s], retry_on: [network, sometimes]}\n",
			wantField: "policies.p.retry_on[1]",
			wantMsg:   `not "sometimes"`,
		},
		{
			// A sender compares status codes as written: "0429" would
			// never match a 429, so it is refused rather than ignored.
			name:      "RetryOnCodeLeadingZero",
			yaml:      "policies:\n  p: {backoff: [0s], retry_on: [5xx, \"0429\"]}\n",
			wantField: "policies.p.retry_on[1]",
			wantMsg:   `not "0429"`,
		},
		{
			name:      "RetryOnCodeSigned",
			yaml:      "policies:\n  p: {backoff: [0s], retry_on: [\"+429\"]}\n",
			wantField: "policies.p.retry_on[0]",
		},
		{
			name:      "NoBackoff",
			yaml:      "policies:\n  p: {ttr: 30s}\n",
			wantField: "policies.p.backoff",
		},
		{
			name:      "TopicUnknownPolicy",
			yaml:      "topics:\n  t: {channel: webhook, policy: nope}\n",
			wantField: "topics.t.policy",
			wantMsg:   `unknown policy "nope"`,
		},
		{
			name:      "TopicBadChannel",
			yaml:      "topics:\n  t: {channel: email}\n",
			wantField: "topics.t.channel",
		},
		{
			name:      "BackoffTooLong",
			yaml:      "policies:\n  p: {backoff: [" + strings.Repeat("1s, ", notify.MaxBackoff) + "1s]}\n",
			wantField: "policies.p.backoff",
			wantMsg:   "more than 100",
		},
		{
			name:      "JitterNaN",
			yaml:      "policies:\n  p: {backoff: [0s], jitter: .nan}\n",
			wantField: "policies.p.jitter",
			wantMsg:   "between 0 and 1",
		},
		{
			name:      "JitterInf",
			yaml:      "policies:\n  p: {backoff: [0s], jitter: .inf}\n",
			wantField: "policies.p.jitter",
			wantMsg:   "between 0 and 1",
		},
		{
			name:      "JitterNegative",
			yaml:      "policies:\n  p: {backoff: [0s], jitter: -0.1}\n",
			wantField: "policies.p.jitter",
			wantMsg:   "between 0 and 1",
		},
		{
			name:      "OnDoneFileURL",
			yaml:      "topics:\n  t: {channel: poll, poll: {field: f, values: [x], on_done: 'file:///etc/passwd'}}\n",
			wantField: "topics.t.poll.on_done",
			wantMsg:   "http or https URL",
		},
		{
			name:      "OnDoneWithoutHost",
			yaml:      "topics:\n  t: {channel: poll, poll: {field: f, values: [x], on_done: 'https:///done'}}\n",
			wantField: "topics.t.poll.on_done",
			wantMsg:   "http or https URL",
		},
		{
			// A URL refused for its port still shows its password nowhere:
			// herald policy check prints the error and serve logs it.
			name:      "OnDoneCredentialsHidden",
			yaml:      "topics:\n  t: {channel: poll, poll: {field: f, values: [x], on_done: 'https://hook:OnDonePassw0rd@hooks.example:99999/done'}}\n",
			wantField: "topics.t.poll.on_done",
			wantMsg:   `not "https://xxxxx@hooks.example:99999/done"`,
			hidden:    "OnDonePassw0rd",
		},
		{
			name:      "OnDoneNotAURLCredentialsHidden",
			yaml:      "topics:\n  t: {channel: poll, poll: {field: f, values: [x], on_done: 'hook:OnDonePassw0rd@hooks.example:8443'}}\n",
			wantField: "topics.t.poll.on_done",
			wantMsg:   "xxxxx@hooks.example:8443",
			hidden:    "OnDonePassw0rd",
		},
		{
			name:      "TargetGopher",
			yaml:      "topics:\n  t: {channel: webhook, target: 'gopher://x'}\n",
			wantField: "topics.t.target",
			wantMsg:   "http or https URL",
		},
		{
			name:      "TargetGopherWithoutChannel",
			yaml:      "topics:\n  t: {target: 'gopher://x'}\n",
			wantField: "topics.t.target",
		},
		{
			name:      "SMSTargetNotE164",
			yaml:      "topics:\n  t: {channel: sms, target: 'https://x.example'}\n",
			wantField: "topics.t.target",
			wantMsg:   "E.164",
		},
		{
			name:      "SMSTargetUnquoted",
			yaml:      "topics:\n  t: {channel: sms, target: +14155550100}\n",
			wantField: "topics.t.target",
			wantMsg:   "quote the number",
		},
		{
			name:      "PullTarget",
			yaml:      "topics:\n  t: {channel: pull, target: 'https://x.example'}\n",
			wantField: "topics.t.target",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			_, err := parse([]byte(tt.yaml))
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.wantField, fe.Field)
			require.Contains(t, fe.Message, tt.wantMsg)
			if tt.hidden != "" {
				require.NotContains(t, err.Error(), tt.hidden)
			}
		})
	}

	t.Run("BadYAML", func(t *testing.T) {
		t.Parallel()

		_, err := parse([]byte("policies:\n  p: [unclosed\n"))
		require.Error(t, err)
	})
}

func TestLoad(t *testing.T) {
	t.Parallel()

	t.Run("ShippedFile", func(t *testing.T) {
		t.Parallel()

		s, err := Load("../configs/policies.yaml")
		require.NoError(t, err)

		last := func(name string) (int, time.Duration) {
			p, ok := s.Policy(name)
			require.True(t, ok, name)
			sched := Schedule(p.Backoff)
			return len(sched), sched[len(sched)-1]
		}
		n, total := last(DefaultName)
		require.Equal(t, 9, n)
		require.Equal(t, 24*time.Hour+22*time.Minute, total)
		n, total = last("alipay-notify")
		require.Equal(t, 8, n)
		require.Equal(t, 24*time.Hour+24*time.Minute, total)
		n, total = last("wechatpay-notify")
		require.Equal(t, 16, n)
		require.Equal(t, 24*time.Hour+4*time.Minute, total)

		require.Equal(t, "success", s.Policies["alipay-notify"].SuccessBody)
		require.JSONEq(t, `{"code":"SUCCESS"}`, s.Policies["wechatpay-notify"].SuccessBody)
		for name, channel := range map[string]string{
			"order-notify":         notify.ChannelWebhook,
			"wechat-notify":        notify.ChannelWebhook,
			"payment-poll":         notify.ChannelPoll,
			"appointment-reminder": notify.ChannelSMS,
			"jobs":                 notify.ChannelPull,
		} {
			require.Equal(t, channel, s.Topics[name].Channel, name)
		}
		require.Equal(t, []string{"TRADE_SUCCESS", "TRADE_FINISHED", "TRADE_CLOSED"}, s.Topics["payment-poll"].Poll.Values)
	})

	t.Run("ErrorNamesFileAndField", func(t *testing.T) {
		t.Parallel()

		path := filepath.Join(t.TempDir(), "policies.yaml")
		require.NoError(t, os.WriteFile(path, []byte("policies:\n  p: {backoff: [0s, x]}\n"), 0o600))
		_, err := Load(path)
		require.ErrorContains(t, err, path+": policies.p.backoff[1]: ")
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe)
	})

	t.Run("Missing", func(t *testing.T) {
		t.Parallel()

		_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

func TestDecode(t *testing.T) {
	t.Parallel()

	type inner struct {
		Wait  time.Duration `koanf:"wait"`
		Names []string      `koanf:"names"`
	}
	type config struct {
		Count int   `koanf:"count"`
		Inner inner `koanf:"inner"`
	}

	t.Run("StringsFromEnvironment", func(t *testing.T) {
		t.Parallel()

		var c config
		require.NoError(t, Decode("", map[string]any{"count": "16", "inner": map[string]any{"wait": "90", "names": []string{"a", "b"}}}, &c))
		require.Equal(t, config{Count: 16, Inner: inner{Wait: 90 * time.Second, Names: []string{"a", "b"}}}, c)
	})

	t.Run("WholeNumbersInDecimal", func(t *testing.T) {
		t.Parallel()

		var c config
		require.NoError(t, Decode("", map[string]any{"count": "010"}, &c))
		require.Equal(t, 10, c.Count, "not octal")
		require.NoError(t, Decode("", map[string]any{"count": 12.0}, &c))
		require.Equal(t, 12, c.Count)
		require.NoError(t, Decode("", map[string]any{"count": ""}, &c))
		require.Equal(t, 0, c.Count, "an empty variable")
		for _, v := range []any{2.5, "2.5", "0x10"} {
			err := Decode("", map[string]any{"count": v}, &c)
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe, "%v", v)
			require.Equal(t, "count", fe.Field)
			require.Contains(t, fe.Message, "want a whole number")
		}
	})

	t.Run("BooleansAsText", func(t *testing.T) {
		t.Parallel()

		var c config
		require.NoError(t, Decode("", map[string]any{"inner": map[string]any{"names": []any{true, false, 429}}}, &c))
		require.Equal(t, []string{"true", "false", "429"}, c.Inner.Names, "as a poll's answer spells them")
	})

	t.Run("KeepsFieldsNotGiven", func(t *testing.T) {
		t.Parallel()

		c := config{Count: 3, Inner: inner{Wait: time.Second}}
		require.NoError(t, Decode("", map[string]any{"inner": map[string]any{"names": []any{"x"}}}, &c))
		require.Equal(t, config{Count: 3, Inner: inner{Wait: time.Second, Names: []string{"x"}}}, c)
	})

	t.Run("ErrorPaths", func(t *testing.T) {
		t.Parallel()

		var c config
		err := Decode("", map[string]any{"count": "many"}, &c)
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "count", fe.Field)

		err = Decode("root", map[string]any{"inner": map[string]any{"wait": "-1s"}}, &c)
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "root.inner.wait", fe.Field)

		err = Decode("", map[string]any{"inner": map[string]any{"name": "x"}}, &c)
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "inner.name", fe.Field)
		require.Equal(t, "unknown key", fe.Message)
	})

	t.Run("NotAPointerPanics", func(t *testing.T) {
		t.Parallel()

		require.Panics(t, func() { _ = Decode("", map[string]any{}, config{}) })
	})
}

// FuzzParse feeds policy YAML to Parse: it must never panic, a refusal of
// content that is valid YAML must name a field, and whatever it accepts
// must be a valid Set.
func FuzzParse(f *testing.F) {
	shipped, err := os.ReadFile("../configs/policies.yaml")
	require.NoError(f, err)
	f.Add(shipped)
	for _, s := range []string{
		"",
		"policies:\n  p: {backoff: [0s, 30, 1.5, 2m]}\n",
		"policies:\n  p: {backoff: [0s, -1]}\n",
		"policies:\n  p: {backoff: 2m, ttr: 1e99}\n",
		"topics:\n  t: {channel: poll, poll: {field: a.b, values: [X]}}\n",
		"topics:\n  t: {channel: webhook, policy: nope}\n",
		"policies: [1, 2]\n",
		"a: &x [*x]\n",
		"policies:\n  p:\n    backoff: [0s]\n    jitter: .5\n    retry_on: [429, 5xx]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parse(b)
		if err != nil {
			if _, yamlErr := yaml.Parser().Unmarshal(b); yamlErr == nil {
				var fe *notify.FieldError
				require.ErrorAs(t, err, &fe)
			}
			return
		}
		require.Contains(t, s.Policies, DefaultName)
		for name, p := range s.Policies {
			require.NoError(t, p.Validate(), name)
		}
	})
}

func TestSetRules(t *testing.T) {
	t.Parallel()

	set, err := NewSet(map[string]Policy{
		"merchant": {Backoff: []notify.Duration{0}, Timeout: notify.Duration(3 * time.Second), RetryOn: []string{"5xx"}, SuccessBody: "success", HonorRetryAfter: true},
	}, map[string]Topic{
		"trade-poll": {Channel: notify.ChannelPoll, Poll: &Poll{Method: "POST", Field: "a.b", Values: []string{"X"}, OnDone: "https://hooks.example/done"}},
	})
	require.NoError(t, err)

	require.Equal(t, notify.Rules{Timeout: 3 * time.Second, RetryOn: []string{"5xx"}, SuccessBody: "success", HonorRetryAfter: true},
		set.Rules(&notify.Notification{Topic: "order-notify", Policy: "merchant"}))
	require.Equal(t, notify.Rules{
		Timeout: TimeoutDefault,
		RetryOn: RetryOnDefault,
		Poll:    &notify.PollRule{Method: "POST", Field: "a.b", Values: []string{"X"}, OnDone: "https://hooks.example/done"},
	}, set.Rules(&notify.Notification{Topic: "trade-poll", Policy: "removed-since"}), "an unknown policy falls back to the default")

	current := set
	rules := CurrentRules(func() *Set { return current })
	n := &notify.Notification{Topic: "order-notify", Policy: "merchant"}
	require.Equal(t, "success", rules(n).SuccessBody)
	current, err = NewSet(map[string]Policy{"merchant": {Backoff: []notify.Duration{0}}}, nil)
	require.NoError(t, err)
	require.Empty(t, rules(n).SuccessBody, "a reloaded set applies to the next call")
}

// parse is Load for YAML in memory.
func parse(b []byte) (*Set, error) { return load(rawbytes.Provider(b)) }
