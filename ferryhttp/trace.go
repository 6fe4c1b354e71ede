package ferryhttp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-inbox/ferry"
)

// Tracing of the HTTP edge: a server span per receipt (its stored trace
// context is what every attempt links to; a sender's traceparent is only
// linked to, see startReceipt) and a client span per forward, whose
// context the app receives as traceparent and tracestate. Both only when
// the options name a TracerProvider; otherwise the receiver and the
// forwarder make no span and read or write no trace header.

// HTTP attributes of OpenTelemetry's semantic conventions (v1.43), spelled
// out so that the library needs no semconv package.
const (
	attrHTTPMethod = attribute.Key("http.request.method")
	attrHTTPRoute  = attribute.Key("http.route")
	attrHTTPStatus = attribute.Key("http.response.status_code")
	attrURLFull    = attribute.Key("url.full")
	attrServerAddr = attribute.Key("server.address")
	attrServerPort = attribute.Key("server.port")
	attrErrorType  = attribute.Key("error.type")
)

const receiverRoute = "/webhooks/{source}"

// traceContext is the W3C propagator, whatever the program's global one is.
var traceContext propagation.TraceContext

// startReceipt starts the receipt's server span and returns the request
// with the span in its context. Untraced, it returns req and a nil span.
//
// Anyone can reach the receiver, so the request's traceparent and
// tracestate are the sender's word, not a parent (OpenTelemetry's advice
// for public endpoints, otelhttp's WithPublicEndpoint): were the span their
// child, a parent-based sampler would let any sender force sampling and
// pick the trace id, and its tracestate would be stored with the event and
// sent on to the app. The span's parent is whatever span the program put in
// the request's context (none in ferry serve, so a new root sampled by
// Ferry's own sampler); a valid traceparent becomes a link, so that a
// provider's trace can still be found from Ferry's, without its tracestate.
func (r *Receiver) startReceipt(req *http.Request, source string) (*http.Request, trace.Span) {
	if r.tracer == nil {
		return req, nil
	}
	method := knownMethod(req.Method)
	attrs := []attribute.KeyValue{attrHTTPMethod.String(method), attrHTTPRoute.String(receiverRoute)}
	if _, ok := r.sources[source]; ok { // not a name a sender made up
		attrs = append(attrs, ferry.AttrSource.String(source))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
	if sent := senderSpanContext(req.Header); sent.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sent}))
	}
	ctx, span := r.tracer.Start(req.Context(), method+" "+receiverRoute, opts...)
	return req.WithContext(ctx), span
}

// senderSpanContext is the span context the request's traceparent names,
// without its tracestate: a link needs only the ids.
func senderSpanContext(h http.Header) trace.SpanContext {
	sent := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.HeaderCarrier(h)))
	return sent.WithTraceState(trace.TraceState{})
}

// receiptPhase marks a step of the receipt (verified, stored) on its span,
// with attrs.
func (r *Receiver) receiptPhase(ctx context.Context, name string, attrs ...attribute.KeyValue) {
	if r.tracer == nil {
		return
	}
	trace.SpanFromContext(ctx).AddEvent(name, trace.WithAttributes(attrs...))
}

// receiptTraceContext returns the receipt span's traceparent and tracestate,
// for the store: every attempt links to them. A tracestate too long to
// store is dropped (the delivery is not refused for it). Empty when
// untraced.
func (r *Receiver) receiptTraceContext(ctx context.Context) (traceparent, tracestate string) {
	if r.tracer == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	traceparent, tracestate = carrier["traceparent"], carrier["tracestate"]
	if ferry.ValidateTraceContext(traceparent, tracestate) != nil {
		tracestate = ""
	}
	if ferry.ValidateTraceContext(traceparent, tracestate) != nil {
		return "", ""
	}
	return traceparent, tracestate
}

// endReceipt ends the receipt's span once the answer is written: status,
// outcome, reason and, once verified, the event id. A 503 is an error (the
// store did not commit); a refusal is the sender's mistake, not Ferry's.
func endReceipt(span trace.Span, a answer, eventID string) {
	if span == nil {
		return
	}
	span.SetAttributes(attrHTTPStatus.Int(a.status), ferry.AttrOutcome.String(a.outcome))
	if a.reason != "" {
		span.SetAttributes(ferry.AttrReason.String(a.reason))
	}
	if eventID != "" {
		span.SetAttributes(ferry.AttrEventID.String(eventID))
	}
	if a.status >= 500 {
		span.SetAttributes(attrErrorType.String(strconv.Itoa(a.status)))
		span.SetStatus(codes.Error, a.reason)
	}
	span.End()
}

// knownMethod is method if HTTP defines it, else "_OTHER" (the semantic
// conventions' word), so that a sender cannot name spans.
func knownMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "_OTHER"
}

// tracedClient returns a copy of c whose requests each get a client span
// and carry its traceparent and tracestate.
func tracedClient(c *http.Client, tp trace.TracerProvider) *http.Client {
	traced := *c
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	traced.Transport = &tracingTransport{base: base, tracer: tp.Tracer(ferry.TracerName)}
	return &traced
}

// tracingTransport makes the forward's client span, from the request to the
// app's response headers.
type tracingTransport struct {
	base   http.RoundTripper
	tracer trace.Tracer
}

func (t *tracingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	method := knownMethod(req.Method)
	attrs := []attribute.KeyValue{attrHTTPMethod.String(method), attrURLFull.String(spanURL(req.URL)), attrServerAddr.String(req.URL.Hostname())}
	if port := req.URL.Port(); port != "" {
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, attrServerPort.Int(p))
		}
	}
	ctx, span := t.tracer.Start(req.Context(), method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()

	// A RoundTripper must not change the request it is given.
	req = req.Clone(ctx)
	traceContext.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		span.SetAttributes(attrErrorType.String(errorType(err)))
		span.SetStatus(codes.Error, transportText(err))
		return nil, err
	}
	span.SetAttributes(attrHTTPStatus.Int(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetAttributes(attrErrorType.String(strconv.Itoa(resp.StatusCode)))
		span.SetStatus(codes.Error, statusText(resp.StatusCode))
	}
	return resp, nil
}

// spanURL is u's scheme and host only: a forward URL may carry the app's
// token in its path ("/hooks/<token>") as well as in its query or
// credentials, and a span is read by more people than the config.
func spanURL(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

// transportText is err's text when it quotes nothing of the app's (a
// timeout, a cancel, a dial or a read of the connection, one closed early,
// a TLS handshake that failed, plain HTTP to an https URL), and otherwise
// says the answer was not HTTP.
func transportText(err error) string {
	_, op := errors.AsType[*net.OpError](err)
	ne, isNet := errors.AsType[net.Error](err)
	_, cert := errors.AsType[*tls.CertificateVerificationError](err)
	_, record := errors.AsType[tls.RecordHeaderError](err) // its text leaves the record's bytes out
	_, alert := errors.AsType[tls.AlertError](err)
	if op || isNet && ne.Timeout() || cert || record || alert || errors.Is(err, http.ErrSchemeMismatch) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return err.Error()
	}
	return "no HTTP answer (the event's last error keeps what the transport said)"
}

func errorType(err error) string {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return "timeout"
	}
	return "request_failed"
}
