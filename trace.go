package ferry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing. Ferry takes an OpenTelemetry trace.TracerProvider (the API
// only: the SDK and an exporter are the program's choice) in Config and in
// ferryhttp's options. Without one nothing is traced and no span is made.
//
// A receipt's span context is stored with its event (Event.Traceparent), so
// that each attempt, in whichever process claims it, is a child of the
// receipt's span and links to it: one trace from the receipt to the app's.
// The receipt's span never continues a sender's trace (ferryhttp's
// ReceiverOptions.TracerProvider says why), so the stored context, and
// what attempts inherit from it, is Ferry's own.

// TracerName is the instrumentation scope of Ferry's spans.
const TracerName = "github.com/ferry-inbox/ferry"

// Attributes of Ferry's spans, for queries in a tracing backend. None
// carries a payload, a header or a secret.
const (
	AttrSource    = attribute.Key("ferry.source")     // the source name
	AttrEventID   = attribute.Key("ferry.event_id")   // the provider's event id
	AttrEventType = attribute.Key("ferry.event_type") // the provider's event type
	AttrAttempt   = attribute.Key("ferry.attempt")    // the attempt number, from 1
	AttrOutcome   = attribute.Key("ferry.outcome")    // how a receipt or an attempt ended
	AttrReason    = attribute.Key("ferry.reason")     // why a receipt was refused or not stored
)

// traceContext is the W3C propagator: Ferry reads and writes traceparent and
// tracestate, whatever the program's global propagator is.
var traceContext propagation.TraceContext

// receiptSpanContext returns the span context stored with ev, invalid when
// the receipt was not traced.
func receiptSpanContext(ev *Event) trace.SpanContext {
	if ev.Traceparent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": ev.Traceparent}
	if ev.Tracestate != "" {
		carrier["tracestate"] = ev.Tracestate
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), carrier))
}

// startAttempt starts the span of one attempt, from its claim: a child of
// the receipt's span, linked to it, or a root when the receipt was not
// traced. It returns ctx unchanged and a nil span when tracing is off.
func (c *Client) startAttempt(ctx context.Context, cl *Claim, claimedAt time.Time) (context.Context, trace.Span) {
	if c.tracer == nil {
		return ctx, nil
	}
	ev := cl.Event
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(claimedAt),
		trace.WithAttributes(
			AttrSource.String(ev.Source), AttrEventID.String(ev.EventID), AttrEventType.String(ev.Type),
			AttrAttempt.Int(ev.Attempt), attribute.Bool("ferry.previous_unfinished", cl.PreviousUnfinished),
		),
	}
	if receipt := receiptSpanContext(ev); receipt.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, receipt)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: receipt}))
	} else {
		// Not a child of whatever span the caller of Start had.
		opts = append(opts, trace.WithNewRoot())
	}
	return c.tracer.Start(ctx, "ferry.attempt", opts...)
}

// endAttempt ends an attempt's span with its outcome. A failed, dead or
// lost attempt is an error, described as a log line would describe it.
func endAttempt(span trace.Span, outcome Outcome, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(AttrOutcome.String(string(outcome)))
	switch outcome {
	case OutcomeFailed, OutcomeDead, OutcomeLeaseExpired:
		desc := string(outcome)
		if err != nil {
			desc = logSafe(err)
		}
		span.SetStatus(codes.Error, desc)
	}
	span.End()
}
