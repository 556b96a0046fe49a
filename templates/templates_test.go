package templates

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

var fixedNow = time.Date(2026, 5, 1, 12, 30, 45, 0, time.UTC)

type testBundle struct {
	set *Set
}

func setup(t *testing.T, dir string) *testBundle {
	t.Helper()
	set, err := Load(dir)
	require.NoError(t, err)
	set.nowFunc = func() time.Time { return fixedNow }
	return &testBundle{set: set}
}

func notification(payload string) *notify.Notification {
	return &notify.Notification{
		ID:       "ord-1001",
		Topic:    "order-notify",
		Channel:  notify.ChannelWebhook,
		Target:   "https://merchant.example/notify",
		Attempts: 2,
		Payload:  json.RawMessage(payload),
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()

	t.Run("ShippedTemplatesOnly", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, ".")
		require.Equal(t, []string{"appointment-reminder.sms", "order-notify.json", "payment-result.json"}, bundle.set.Names())
	})

	t.Run("BrokenNamesFileAndLine", func(t *testing.T) {
		t.Parallel()
		_, err := Load("testdata/broken")
		require.ErrorContains(t, err, "bad.json:3")
		require.ErrorContains(t, err, "nosuchfunc")
	})

	t.Run("MissingFolder", func(t *testing.T) {
		t.Parallel()
		_, err := Load("testdata/nope")
		require.ErrorContains(t, err, "testdata/nope")
	})

	t.Run("SkipsOtherFiles", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, "testdata/badjson")
		require.Equal(t, []string{"raw.json.tmpl"}, bundle.set.Names())
	})

	// A ConfigMap volume holds every file as a link through ..data, itself
	// a link to the hidden folder of the current version.
	t.Run("ConfigMapVolume", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		version := filepath.Join(dir, "..2026_03_01_12_00_00.000000001")
		require.NoError(t, os.Mkdir(version, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(version, "ids.json"), []byte(`{"id": {{json .id}}}`), 0o644))
		require.NoError(t, os.Symlink(filepath.Base(version), filepath.Join(dir, "..data")))
		require.NoError(t, os.Symlink(filepath.Join("..data", "ids.json"), filepath.Join(dir, "ids.json")))
		bundle := setup(t, dir)
		require.Equal(t, []string{"ids.json"}, bundle.set.Names())
		out, err := bundle.set.Render("ids.json", notification(`{}`))
		require.NoError(t, err)
		require.JSONEq(t, `{"id": "ord-1001"}`, string(out))
	})

	t.Run("LinkToAFolderIsSkipped", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		require.NoError(t, os.Mkdir(filepath.Join(dir, "folder"), 0o755))
		require.NoError(t, os.Symlink("folder", filepath.Join(dir, "folder.tmpl")))
		bundle := setup(t, dir)
		require.Empty(t, bundle.set.Names())
	})

	t.Run("BrokenLinkNamesItsFile", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		require.NoError(t, os.Symlink("gone.json", filepath.Join(dir, "order.json")))
		_, err := Load(dir)
		require.ErrorContains(t, err, "order.json")
	})
}

func TestRender(t *testing.T) {
	t.Parallel()

	bundle := setup(t, ".")

	t.Run("OrderNotify", func(t *testing.T) {
		t.Parallel()
		out, err := bundle.set.Render("order-notify.json", notification(
			`{"out_trade_no":"T-1","trade_no":"2026050122001","trade_status":"TRADE_SUCCESS","total_amount":"88.88"}`))
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.Unmarshal(out, &got))
		require.Equal(t, map[string]any{
			"notify_id":    "ord-1001",
			"notify_type":  "trade_status_sync",
			"notify_time":  "2026-05-01 12:30:45",
			"out_trade_no": "T-1",
			"trade_no":     "2026050122001",
			"trade_status": "TRADE_SUCCESS",
			"total_amount": "88.88",
		}, got)
	})

	t.Run("OrderNotifyKeepsNumbersExact", func(t *testing.T) {
		t.Parallel()
		out, err := bundle.set.Render("order-notify.json", notification(
			`{"out_trade_no":"T-2","trade_status":"TRADE_CLOSED","total_amount":12.30,"notify_time":"2026-05-01 08:00:00"}`))
		require.NoError(t, err)
		require.Contains(t, string(out), `"total_amount": 12.30`)
		require.Contains(t, string(out), `"notify_time": "2026-05-01 08:00:00"`)
		require.NotContains(t, string(out), `"trade_no"`)
	})

	t.Run("MissingFieldIsAnError", func(t *testing.T) {
		t.Parallel()
		_, err := bundle.set.Render("order-notify.json", notification(`{"out_trade_no":"T-3","total_amount":"1.00"}`))
		require.ErrorContains(t, err, "order-notify.json")
		require.ErrorContains(t, err, "trade_status")
	})

	t.Run("NoPayload", func(t *testing.T) {
		t.Parallel()
		_, err := bundle.set.Render("order-notify.json", notification(""))
		require.ErrorContains(t, err, "render order-notify.json")
	})

	t.Run("PaymentResult", func(t *testing.T) {
		t.Parallel()
		out, err := bundle.set.Render("payment-result.json", notification(
			`{"payment_id":"pay_1","status":"failed","amount":1999,"currency":"EUR","reason":"card \"declined\" <3"}`))
		require.NoError(t, err)
		var got struct {
			Type      string         `json:"type"`
			Timestamp string         `json:"timestamp"`
			Data      map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(out, &got))
		require.Equal(t, "payment.result", got.Type)
		require.Equal(t, "2026-05-01T12:30:45Z", got.Timestamp)
		require.Equal(t, map[string]any{
			"payment_id": "pay_1", "status": "failed", "amount": float64(1999), "currency": "EUR", "reason": `card "declined" <3`,
		}, got.Data)
	})

	t.Run("AppointmentReminder", func(t *testing.T) {
		t.Parallel()
		out, err := bundle.set.Render("appointment-reminder.sms", notification(
			`{"name":"Ana","with":"Dr. Silva","starts_at":"2026-05-04T15:30:00+02:00"}`))
		require.NoError(t, err)
		require.Equal(t, "Hi Ana, a reminder of your appointment with Dr. Silva at 15:30 on Mon 4 May.\n", string(out))
	})

	t.Run("BadDate", func(t *testing.T) {
		t.Parallel()
		_, err := bundle.set.Render("appointment-reminder.sms", notification(
			`{"name":"Ana","with":"Dr. Silva","starts_at":"tomorrow"}`))
		require.ErrorContains(t, err, `"tomorrow" is not an RFC 3339 time`)
	})

	t.Run("UnknownTemplate", func(t *testing.T) {
		t.Parallel()
		_, err := bundle.set.Render("nope.json", notification(`{}`))
		require.ErrorContains(t, err, `template "nope.json" is not loaded`)
	})

	t.Run("InvalidJSONOutput", func(t *testing.T) {
		t.Parallel()
		bad := setup(t, "testdata/badjson")
		out, err := bad.set.Render("raw.json.tmpl", notification(`{"raw":42}`))
		require.NoError(t, err)
		require.JSONEq(t, `{"raw":42}`, string(out))
		_, err = bad.set.Render("raw.json.tmpl", notification(`{"raw":"unquoted"}`))
		require.ErrorContains(t, err, "output is not valid JSON")
	})
}

func TestBody(t *testing.T) {
	t.Parallel()

	bundle := setup(t, ".")

	t.Run("Payload", func(t *testing.T) {
		t.Parallel()
		body, ct, err := bundle.set.Body(notification(`{"a":1}`))
		require.NoError(t, err)
		require.Equal(t, `{"a":1}`, string(body))
		require.Equal(t, ContentTypeJSON, ct)
	})

	t.Run("NoPayload", func(t *testing.T) {
		t.Parallel()
		body, ct, err := (*Set)(nil).Body(notification(""))
		require.NoError(t, err)
		require.Equal(t, "null", string(body))
		require.Equal(t, ContentTypeJSON, ct)
	})

	t.Run("Template", func(t *testing.T) {
		t.Parallel()
		n := notification(`{"name":"Ana","with":"Dr. Silva","starts_at":"2026-05-04T15:30:00+02:00"}`)
		n.Template = "appointment-reminder.sms"
		body, ct, err := bundle.set.Body(n)
		require.NoError(t, err)
		require.Contains(t, string(body), "Hi Ana")
		require.Equal(t, ContentTypeText, ct)
	})

	t.Run("TemplateWithoutSet", func(t *testing.T) {
		t.Parallel()
		n := notification(`{}`)
		n.Template = "order-notify.json"
		_, _, err := (*Set)(nil).Body(n)
		require.ErrorContains(t, err, `template "order-notify.json" named, but no templates are loaded`)
	})
}

func TestContentType(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name string
		want string
	}{
		{name: "order-notify.json", want: ContentTypeJSON},
		{name: "order-notify.json.tmpl", want: ContentTypeJSON},
		{name: "appointment-reminder.sms", want: ContentTypeText},
		{name: "letter.txt.tmpl", want: ContentTypeText},
	} {
		require.Equal(t, tt.want, ContentType(tt.name), tt.name)
	}
}

// FuzzRenderOrderNotify checks that whatever strings a payload carries, the
// JSON template renders valid JSON that carries them unchanged.
func FuzzRenderOrderNotify(f *testing.F) {
	for _, seed := range [][3]string{
		{"T-1", "TRADE_SUCCESS", "88.88"},
		{`"}, "x": {"`, `\`, "</script>"},
		{"\u2028\u2029", "\x00\x1f", "{{.id}}"},
		{"\xff\xfe", "é中文", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	set, err := Load(".")
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, outTradeNo, status, amount string) {
		payload, err := json.Marshal(map[string]string{"out_trade_no": outTradeNo, "trade_status": status, "total_amount": amount})
		require.NoError(t, err)
		var want map[string]string
		require.NoError(t, json.Unmarshal(payload, &want))

		out, err := set.Render("order-notify.json", notification(string(payload)))
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.Unmarshal(out, &got))
		require.Equal(t, want["out_trade_no"], got["out_trade_no"])
		require.Equal(t, want["trade_status"], got["trade_status"])
		require.Equal(t, want["total_amount"], got["total_amount"])
	})
}

// TestLoadSkipsByteOrderMark loads templates saved by an editor that
// starts UTF-8 files with a byte order mark: the mark is not part of what
// they render, so the JSON one renders valid JSON and the SMS does not
// start with an invisible character, where every render of the JSON one
// failed ("not valid JSON at byte 1") and its notifications died.
func TestLoadSkipsByteOrderMark(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const bom = "\ufeff"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "paid.json"), []byte(bom+`{"id": {{json .id}}}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "paid.sms"), []byte(bom+"Order {{.id}} is paid"), 0o600))
	b := setup(t, dir)

	got, err := b.set.Render("paid.json", notification(`{}`))
	require.NoError(t, err)
	require.Equal(t, `{"id": "ord-1001"}`, string(got))
	got, err = b.set.Render("paid.sms", notification(`{}`))
	require.NoError(t, err)
	require.Equal(t, "Order ord-1001 is paid", string(got))
}

// TestReload: a template added to the folder renders once the set is
// reloaded; a folder that no longer parses is refused and what was loaded
// stays.
func TestReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	write("a.json", `{"a": {{json .id}}}`)
	b := setup(t, dir)
	n := notification(`{}`)
	_, err := b.set.Render("b.sms", n)
	require.ErrorContains(t, err, `template "b.sms" is not loaded`)

	write("b.sms", "Order {{.id}}")
	require.NoError(t, b.set.Reload())
	got, err := b.set.Render("b.sms", n)
	require.NoError(t, err)
	require.Equal(t, "Order ord-1001", string(got))

	write("c.json", `{{.Nope`)
	require.ErrorContains(t, b.set.Reload(), "c.json")
	got, err = b.set.Render("b.sms", n)
	require.NoError(t, err, "the templates loaded before stay")
	require.Equal(t, "Order ord-1001", string(got))
	require.Equal(t, []string{"a.json", "b.sms"}, b.set.Names())
}
