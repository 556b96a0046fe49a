// Package tracing is Herald's OpenTelemetry adapter: it traces each enqueue
// and each attempt as spans of one trace, and carries the W3C trace context
// to receivers in the traceparent header. The core packages know nothing of
// OpenTelemetry; they call the small Tracer hooks of client, schedule and
// api, which a *Tracer implements, and with no tracer they do nothing.
//
// The enqueue span joins the caller's trace: the API's Middleware reads an
// incoming traceparent, and a Go caller's context carries its own span. The
// enqueue stores the enqueue span's context in the notification's
// traceparent header, so each attempt, in whichever dispatcher runs it and
// however much later, starts a child span of it, and the webhook sent by
// that attempt carries the attempt span's traceparent. A pull consumer's
// attempt is a child span too, from its reservation to its ack or nack,
// recorded when that answer comes. The enqueue span is a producer span, an
// attempt Herald makes itself (webhook, sms, poll) a client span, since it
// calls the receiver, and a pull consumer's attempt a consumer span.
//
//	tp, err := tracing.NewOTLPProvider(ctx, "http://otel-collector:4318")
//	defer tp.Shutdown(ctx)
//	tr := tracing.New(&tracing.Config{TracerProvider: tp})
//	client.New(&client.Config{Store: st, Tracer: tr})
//	schedule.New(&schedule.Config{Store: st, Senders: senders, Tracer: tr})
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// Span names and attribute keys.
const (
	SpanEnqueue = "herald.enqueue"
	SpanAttempt = "herald.attempt"

	AttrID      = attribute.Key("herald.notification.id")
	AttrTopic   = attribute.Key("herald.topic")
	AttrChannel = attribute.Key("herald.channel")
	// AttrEndpoint names the endpoint (usually a merchant) of a
	// notification sent to one; absent for one sent to a target.
	AttrEndpoint      = attribute.Key("herald.endpoint")
	AttrEnqueueStatus = attribute.Key("herald.enqueue.status")
	AttrAttempt       = attribute.Key("herald.attempt")
	AttrOutcome       = attribute.Key("herald.outcome")
	AttrAction        = attribute.Key("herald.action")
	AttrNextAttemptAt = attribute.Key("herald.next_attempt_at")
	AttrStatusCode    = attribute.Key("http.response.status_code")
)

// instrumentation names the tracer to OpenTelemetry.
const instrumentation = "github.com/heraldhq/herald/tracing"

// enqueueStatus names what an enqueue did, for AttrEnqueueStatus.
var enqueueStatus = map[store.EnqueueStatus]string{store.Created: "created", store.Existing: "existing", store.Replaced: "replaced"}

// Config configures a Tracer.
type Config struct {
	// TracerProvider makes the spans. Required: NewOTLPProvider, or the
	// application's own.
	TracerProvider trace.TracerProvider
	// Propagator reads and writes trace context in headers. Default W3C
	// Trace Context (traceparent and tracestate).
	Propagator propagation.TextMapPropagator
}

// Tracer traces enqueues and attempts; it implements client.Tracer and
// schedule.Tracer, and its Middleware serves api.Config.Middleware.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

var (
	_ client.Tracer   = (*Tracer)(nil)
	_ schedule.Tracer = (*Tracer)(nil)
)

// New returns a Tracer for cfg.
func New(cfg *Config) *Tracer {
	if cfg.TracerProvider == nil {
		panic("tracing: TracerProvider is required")
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracer{tracer: cfg.TracerProvider.Tracer(instrumentation), prop: prop}
}

// Middleware reads the trace context of an incoming request (its
// traceparent) into the request's context, so that an enqueue joins the
// caller's trace.
func (t *Tracer) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))))
	})
}

// StartEnqueue starts the enqueue span of n, a child of ctx's span or, when
// ctx has none, of a traceparent the caller put in n's headers, and stores
// the span's context in n's headers for the attempts.
func (t *Tracer) StartEnqueue(ctx context.Context, n *notify.Notification) func(store.EnqueueStatus, error) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = t.extract(ctx, n.Headers)
	}
	ctx, span := t.tracer.Start(ctx, SpanEnqueue, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrsOf(n)...))
	n.Headers = t.inject(ctx, n.Headers)
	return func(status store.EnqueueStatus, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(AttrEnqueueStatus.String(enqueueStatus[status]))
		}
		span.End()
	}
}

// StartAttempt starts the span of n's attempt as a child of its enqueue
// span, and sets the attempt span's traceparent on n for its sender. The
// span is a client span: Herald calls the receiver, whose server span is
// its child, so that tracing backends draw the call from Herald to it.
func (t *Tracer) StartAttempt(ctx context.Context, n *notify.Notification) (context.Context, func(*store.Finish)) {
	ctx, span := t.startAttempt(ctx, n, trace.WithSpanKind(trace.SpanKindClient))
	n.Headers = t.inject(ctx, n.Headers)
	return ctx, func(f *store.Finish) { endAttempt(span, f) }
}

// AttemptRecorded records the span of an attempt that ran elsewhere: a
// pull reservation acked or nacked, or one the reaper took back when its
// time ran out (a consumer that never answered, a dispatcher that died); a
// consumer span, child of its enqueue span, from the attempt's start to its
// end.
func (t *Tracer) AttemptRecorded(ctx context.Context, f *store.Finish) {
	_, span := t.startAttempt(ctx, f.Notification, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(f.Attempt.StartedAt))
	endAttempt(span, f, trace.WithTimestamp(f.Attempt.FinishedAt))
}

// startAttempt starts the span of n's attempt as a child of its enqueue
// span, named in n's headers; opts give its kind.
func (t *Tracer) startAttempt(ctx context.Context, n *notify.Notification, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := t.extract(context.Background(), n.Headers)
	opts = append(opts, trace.WithAttributes(append(attrsOf(n), AttrAttempt.Int(n.Attempts))...))
	if sc := trace.SpanContextFromContext(parent); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return t.tracer.Start(ctx, SpanAttempt, opts...)
}

// attrsOf returns the attributes that say which notification a span is
// of, and where it goes when that is an endpoint. A target URL is left out:
// it may carry the receiver's credentials.
func attrsOf(n *notify.Notification) []attribute.KeyValue {
	out := []attribute.KeyValue{AttrID.String(n.ID), AttrTopic.String(n.Topic), AttrChannel.String(n.Channel)}
	if n.Endpoint != "" {
		out = append(out, AttrEndpoint.String(n.Endpoint))
	}
	return out
}

// endAttempt ends an attempt's span with its outcome and next step.
func endAttempt(span trace.Span, f *store.Finish, opts ...trace.SpanEndOption) {
	a := f.Attempt
	span.SetAttributes(AttrOutcome.String(string(a.Outcome)), AttrAction.String(string(f.Action)))
	if a.StatusCode != 0 {
		span.SetAttributes(AttrStatusCode.Int(a.StatusCode))
	}
	if f.Action == notify.ActionRetry {
		span.SetAttributes(AttrNextAttemptAt.String(f.NextAt.UTC().Format(time.RFC3339Nano)))
	}
	if a.Outcome != notify.OutcomeSuccess && a.Outcome != notify.OutcomeReleased {
		// An answer's error quotes the receiver's body, which may hold
		// anything, the payload it was sent included: the trace names the
		// status, and the history keeps the body.
		desc := a.Error
		if a.StatusCode != 0 {
			desc = fmt.Sprintf("status %d %s", a.StatusCode, http.StatusText(a.StatusCode))
		}
		span.SetStatus(codes.Error, desc)
	}
	span.End(opts...)
}

// extract returns ctx with the remote span context of headers, matched by
// name whatever their case.
func (t *Tracer) extract(ctx context.Context, headers map[string]string) context.Context {
	if len(headers) == 0 {
		return ctx
	}
	h := make(http.Header, len(headers))
	for k, v := range headers {
		h.Set(k, v)
	}
	return t.prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// inject returns a copy of headers whose trace context (whatever its names'
// case) is replaced by ctx's; the caller's map is never changed, since a
// notification's may be shared.
func (t *Tracer) inject(ctx context.Context, headers map[string]string) map[string]string {
	out := maps.Clone(headers)
	if out == nil {
		out = map[string]string{}
	}
	for _, name := range t.prop.Fields() {
		for k := range out {
			if strings.EqualFold(k, name) {
				delete(out, k)
			}
		}
	}
	t.prop.Inject(ctx, propagation.MapCarrier(out))
	return out
}

// NewOTLPProvider returns a TracerProvider that batches spans to an OTLP
// collector over HTTP, for the service "herald". endpoint is a URL such as
// http://otel-collector:4318 (its path defaults to /v1/traces), or a bare
// host:port for plain HTTP. The service is named by OTEL_SERVICE_NAME when
// set, and described by OTEL_RESOURCE_ATTRIBUTES. Shut the provider down to
// flush its spans.
func NewOTLPProvider(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	var opts []otlptracehttp.Option
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, fmt.Errorf("otel.endpoint: %w", err)
		}
		// A collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT gives it:
		// the exporter would post to it as it is.
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	} else {
		opts = append(opts, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otel.endpoint: %w", err)
	}
	// "herald" is only the default: the operator's OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES name the deployment, as for any service.
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "herald")), resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// RouteErrors sends the OpenTelemetry SDK's own errors, such as an export
// the collector refused or never answered, to log as warnings. The SDK
// otherwise writes them with the standard library's log package: lines that
// a JSON log pipeline cannot parse and that the log level does not govern,
// one every export for as long as the collector is down. The setting is
// process-wide.
func RouteErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: OpenTelemetry failed; spans may be lost", "error", err)
	}))
}
