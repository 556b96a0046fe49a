package tracing_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/internal/heraldtest"
	"github.com/heraldhq/herald/internal/redistest"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/notify/httpsend"
	"github.com/heraldhq/herald/notify/webhook"
	"github.com/heraldhq/herald/policy"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/tracing"
)

// The caller's trace, as an incoming traceparent names it.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

type testBundle struct {
	store    *store.Store
	recorder *tracetest.SpanRecorder
	api      *httptest.Server
	// traceparents are the headers the receiver saw, in order.
	mu           sync.Mutex
	traceparents []string
}

// setup runs the API and a dispatcher with one tracer recording in memory,
// and a receiver that fails the first attempt of each notification with a
// 500 and answers the next with 200.
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{recorder: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.recorder))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.New(&tracing.Config{TracerProvider: tp})

	var hits atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.traceparents = append(b.traceparents, r.Header.Get("traceparent"))
		b.mu.Unlock()
		if hits.Add(1) == 1 {
			http.Error(w, "busy", http.StatusInternalServerError)
		}
	}))
	t.Cleanup(rcv.Close)

	var err error
	b.store, err = store.New(&store.Config{Client: server.Client(t), Namespace: redistest.Namespace(t), Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	set, err := policy.NewSet(map[string]policy.Policy{
		"quick": {Backoff: []notify.Duration{0, notify.Duration(10 * time.Millisecond), notify.Duration(10 * time.Millisecond)}},
	}, map[string]policy.Topic{"orders": {Channel: notify.ChannelWebhook, Policy: "quick", Target: rcv.URL},
		"refunds": {Channel: notify.ChannelWebhook, Policy: "quick", Endpoint: "acme-shop"},
		"jobs":    {Channel: notify.ChannelPull, Policy: "quick"}})
	require.NoError(t, err)
	set, err = set.WithEndpoints(map[string]endpoint.Endpoint{"acme-shop": {URL: rcv.URL}})
	require.NoError(t, err)
	policies := func() *policy.Set { return set }
	endpoints := endpoint.NewRegistry(&endpoint.RegistryConfig{FileFunc: func() map[string]endpoint.Endpoint { return set.Endpoints }})
	hook, err := webhook.New(&webhook.Config{Endpoints: endpoints, Common: httpsend.Common{Rules: policy.CurrentRules(policies),
		HTTP: httpsend.Config{AllowNetworks: []string{"127.0.0.0/8"}, Logger: heraldtest.Logger(t)}}})
	require.NoError(t, err)
	d, err := schedule.New(&schedule.Config{Store: b.store, Senders: map[string]notify.Sender{notify.ChannelWebhook: hook},
		PoliciesFunc: policies, Tracer: tr, Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(d.Stop)

	srv, err := api.New(&api.Config{Store: b.store, PoliciesFunc: policies, Tracer: tr, Middleware: tr.Middleware,
		Logger: heraldtest.Logger(t)})
	require.NoError(t, err)
	b.api = httptest.NewServer(srv)
	t.Cleanup(func() {
		b.api.Close()
		_ = srv.Close()
	})
	return b
}

// enqueue posts a notification of topic orders with the given traceparent
// ("" for none) and returns the status code.
func (b *testBundle) enqueue(t *testing.T, id, traceparent string) int {
	t.Helper()
	status, _ := b.post(t, "/v1/notifications", `{"id":"`+id+`","topic":"orders","payload":{"order":1}}`, traceparent)
	return status
}

// post posts body to the API with the given traceparent ("" for none) and
// returns the status code and the answer.
func (b *testBundle) post(t *testing.T, path, body, traceparent string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.api.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, out
}

// waitSucceeded waits until id has succeeded.
func (b *testBundle) waitSucceeded(t *testing.T, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := b.store.Get(context.Background(), id)
		return err == nil && n.State == notify.StateSucceeded
	}, 20*time.Second, 10*time.Millisecond)
}

// ended returns the ended spans named name, in the order they ended.
func (b *testBundle) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range b.recorder.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func TestOneTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, http.StatusCreated, b.enqueue(t, "order-1-paid", "00-"+callerTrace+"-"+callerSpan+"-01"))
	b.waitSucceeded(t, "order-1-paid")

	// The enqueue span continues the caller's trace.
	enq := b.ended(tracing.SpanEnqueue)
	require.Len(t, enq, 1)
	require.Equal(t, callerTrace, enq[0].SpanContext().TraceID().String())
	require.Equal(t, callerSpan, enq[0].Parent().SpanID().String())
	require.Equal(t, "created", attrs(enq[0])[tracing.AttrEnqueueStatus].AsString())
	require.Equal(t, trace.SpanKindProducer, enq[0].SpanKind())

	// Each attempt is a child of it, with its outcome.
	attempts := b.ended(tracing.SpanAttempt)
	require.Len(t, attempts, 2)
	for i, want := range []struct {
		outcome, action string
		status          int64
		code            codes.Code
	}{
		{outcome: "retry", action: "retry", status: 500, code: codes.Error},
		{outcome: "success", action: "succeed", status: 200, code: codes.Unset},
	} {
		s := attempts[i]
		a := attrs(s)
		require.Equal(t, callerTrace, s.SpanContext().TraceID().String(), "attempt %d", i)
		require.Equal(t, enq[0].SpanContext().SpanID(), s.Parent().SpanID(), "attempt %d", i)
		require.EqualValues(t, i, a[tracing.AttrAttempt].AsInt64(), "attempt %d", i)
		require.Equal(t, want.outcome, a[tracing.AttrOutcome].AsString(), "attempt %d", i)
		require.Equal(t, want.status, a[tracing.AttrStatusCode].AsInt64(), "attempt %d", i)
		require.Equal(t, want.code, s.Status().Code, "attempt %d", i)
		require.Equal(t, "order-1-paid", a[tracing.AttrID].AsString())
		// Herald calls the receiver: the receiver's server span is the
		// child of a client span.
		require.Equal(t, trace.SpanKindClient, s.SpanKind(), "attempt %d", i)
	}
	// The receiver's answer ("busy") stays in the history: the trace says
	// what failed, not what the receiver wrote, which may hold anything.
	require.Equal(t, "status 500 Internal Server Error", attempts[0].Status().Description)
	_, hasNext := attrs(attempts[0])[tracing.AttrNextAttemptAt]
	require.True(t, hasNext, "a retried attempt says when the next is due")

	// The receiver saw each attempt's own span in traceparent.
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Len(t, b.traceparents, 2)
	for i, tp := range b.traceparents {
		require.Equal(t, "00-"+callerTrace+"-"+attempts[i].SpanContext().SpanID().String()+"-01", tp, "attempt %d", i)
	}
}

// TestSpansNameTheEndpoint: the spans of a notification sent to an
// endpoint name it, so that a trace search finds a merchant's failing
// attempts; those sent to a target name none.
func TestSpansNameTheEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, out := b.post(t, "/v1/notifications", `{"id":"refund-1","topic":"refunds","payload":{"refund":1}}`, "")
	require.Equal(t, http.StatusCreated, status, "%s", out)
	require.Equal(t, http.StatusCreated, b.enqueue(t, "order-4-paid", ""))
	b.waitSucceeded(t, "refund-1")
	b.waitSucceeded(t, "order-4-paid")
	for _, name := range []string{tracing.SpanEnqueue, tracing.SpanAttempt} {
		spans := b.ended(name)
		require.NotEmpty(t, spans, name)
		for _, s := range spans {
			a := attrs(s)
			got, ok := a[tracing.AttrEndpoint]
			if a[tracing.AttrID].AsString() == "refund-1" {
				require.True(t, ok, "%s of refund-1 names no endpoint", name)
				require.Equal(t, "acme-shop", got.AsString(), name)
			} else {
				require.False(t, ok, "%s of %s names an endpoint", name, a[tracing.AttrID].AsString())
			}
		}
	}
}

func TestNewTraceWithoutIncomingOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, http.StatusCreated, b.enqueue(t, "order-2-paid", ""))
	b.waitSucceeded(t, "order-2-paid")
	enq := b.ended(tracing.SpanEnqueue)
	require.Len(t, enq, 1)
	require.False(t, enq[0].Parent().IsValid(), "the enqueue starts the trace")
	for _, s := range b.ended(tracing.SpanAttempt) {
		require.Equal(t, enq[0].SpanContext().TraceID(), s.SpanContext().TraceID())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Len(t, b.traceparents, 2)
	require.Contains(t, b.traceparents[0], enq[0].SpanContext().TraceID().String())
}

func TestTraceContextIsNotContent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The same notification from two traces is one notification: the
	// second enqueue repeats the first, it does not conflict with it.
	require.Equal(t, http.StatusCreated, b.enqueue(t, "order-3-paid", "00-"+callerTrace+"-"+callerSpan+"-01"))
	require.Equal(t, http.StatusOK, b.enqueue(t, "order-3-paid", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
	b.waitSucceeded(t, "order-3-paid")
	enq := b.ended(tracing.SpanEnqueue)
	require.Len(t, enq, 2)
	require.Equal(t, "existing", attrs(enq[1])[tracing.AttrEnqueueStatus].AsString())
	// The attempts belong to the trace that stored it.
	for _, s := range b.ended(tracing.SpanAttempt) {
		require.Equal(t, callerTrace, s.SpanContext().TraceID().String())
	}
}

// TestPullAttempts runs a pull consumer over the API: it nacks its first
// attempt and acks the second. Each is a child span of the enqueue, from
// its reservation to its answer, though the consumer's requests carry
// other traces.
func TestPullAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, _ := b.post(t, "/v1/notifications", `{"id":"job-1","topic":"jobs","payload":{"n":1}}`,
		"00-"+callerTrace+"-"+callerSpan+"-01")
	require.Equal(t, http.StatusCreated, status)
	other := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var reserved []time.Time
	for _, answer := range []string{"nack", "ack"} {
		reserved = append(reserved, time.Now())
		status, out := b.post(t, "/v1/topics/jobs/reserve?wait=5s", "", other)
		require.Equal(t, http.StatusOK, status, "%s", out)
		var res struct {
			Notifications []struct{ Receipt string }
		}
		require.NoError(t, json.Unmarshal(out, &res))
		require.Len(t, res.Notifications, 1)
		time.Sleep(20 * time.Millisecond) // the consumer's work
		body := `{"receipt":"` + res.Notifications[0].Receipt + `"}`
		if answer == "nack" {
			body = `{"receipt":"` + res.Notifications[0].Receipt + `","error":"busy"}`
		}
		status, out = b.post(t, "/v1/notifications/job-1/"+answer, body, other)
		require.Equal(t, http.StatusNoContent, status, "%s", out)
	}

	enq := b.ended(tracing.SpanEnqueue)
	require.Len(t, enq, 1)
	attempts := b.ended(tracing.SpanAttempt)
	require.Len(t, attempts, 2)
	for i, want := range []struct {
		outcome string
		code    codes.Code
	}{{"retry", codes.Error}, {"success", codes.Unset}} {
		s := attempts[i]
		require.Equal(t, callerTrace, s.SpanContext().TraceID().String(), "attempt %d", i)
		require.Equal(t, enq[0].SpanContext().SpanID(), s.Parent().SpanID(), "attempt %d", i)
		require.Equal(t, want.outcome, attrs(s)[tracing.AttrOutcome].AsString(), "attempt %d", i)
		require.EqualValues(t, i, attrs(s)[tracing.AttrAttempt].AsInt64(), "attempt %d", i)
		require.Equal(t, want.code, s.Status().Code, "attempt %d", i)
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind(), "attempt %d", i)
		require.False(t, s.StartTime().Before(reserved[i].Truncate(time.Millisecond)), "attempt %d starts at its reservation", i)
		require.GreaterOrEqual(t, s.EndTime().Sub(s.StartTime()), 20*time.Millisecond, "attempt %d lasts until its answer", i)
	}
}

// TestReapedAttempt: a pull reservation whose consumer never answers is
// taken back when its ttr runs out; that attempt is a span of the trace
// too, from its reservation until it was taken back, as its history says,
// with its ttr_expired outcome.
func TestReapedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, out := b.post(t, "/v1/notifications", `{"id":"job-2","topic":"jobs","ttr":"100ms","payload":{"n":2}}`,
		"00-"+callerTrace+"-"+callerSpan+"-01")
	require.Equal(t, http.StatusCreated, status, "%s", out)
	status, out = b.post(t, "/v1/topics/jobs/reserve?wait=5s", "", "")
	require.Equal(t, http.StatusOK, status, "%s", out)
	require.Contains(t, string(out), "job-2")

	require.Eventually(t, func() bool { return len(b.ended(tracing.SpanAttempt)) > 0 }, 10*time.Second, 10*time.Millisecond,
		"the reaped attempt has no span")
	enq := b.ended(tracing.SpanEnqueue)
	require.Len(t, enq, 1)
	s := b.ended(tracing.SpanAttempt)[0]
	require.Equal(t, callerTrace, s.SpanContext().TraceID().String())
	require.Equal(t, enq[0].SpanContext().SpanID(), s.Parent().SpanID())
	require.Equal(t, string(notify.OutcomeTTRExpired), attrs(s)[tracing.AttrOutcome].AsString())
	require.Equal(t, codes.Error, s.Status().Code)
	require.GreaterOrEqual(t, s.EndTime().Sub(s.StartTime()), 100*time.Millisecond, "from its reservation until it was taken back")
}

// TestOTLPProvider runs a loopback OTLP/HTTP receiver: the spans of a
// provider reach it when the provider shuts down, under the service name
// the operator's OTEL_SERVICE_NAME gives ("herald" without it) and with
// the attributes of OTEL_RESOURCE_ATTRIBUTES.
func TestOTLPProvider(t *testing.T) {
	for _, tt := range []struct {
		name    string
		service string
		want    string
	}{
		{name: "DefaultName", want: "herald"},
		{name: "OperatorsName", service: "herald-eu", want: "herald-eu"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_SERVICE_NAME", tt.service)
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging")
			bodies := make(chan []byte, 10)
			rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if r.URL.Path == "/v1/traces" {
					bodies <- body
				}
			}))
			t.Cleanup(rcv.Close)

			tp, err := tracing.NewOTLPProvider(context.Background(), rcv.URL)
			require.NoError(t, err)
			_, span := tp.Tracer("test").Start(context.Background(), "probe-span")
			span.End()
			require.NoError(t, tp.Shutdown(context.Background()))
			require.Len(t, bodies, 1, "shutting down sends what is left")
			body := <-bodies
			require.Contains(t, string(body), "probe-span")
			require.Contains(t, string(body), "staging")
			m := serviceNameRe.FindSubmatch(body)
			require.NotNil(t, m, "no service.name in the export")
			require.Equal(t, tt.want, string(m[1]))
		})
	}
}

// serviceNameRe reads the service name of an OTLP export, a protobuf
// whose key-value pairs put each string after a tag and its length.
var serviceNameRe = regexp.MustCompile(`service\.name\x12.\x0a.([a-z0-9._-]+)`)
