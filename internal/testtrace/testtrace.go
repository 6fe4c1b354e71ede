// Package testtrace holds what tests need to see the spans code makes, and
// a trace context from elsewhere to give it.
package testtrace

import (
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A sampled trace context from another service: the W3C Trace Context
// example, as traceparent carries it.
const (
	TraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	SpanID      = "00f067aa0ba902b7"
	Traceparent = "00-" + TraceID + "-" + SpanID + "-01"
)

// NewRecorder returns a tracer provider that samples every span, and the
// recorder that holds the spans it ends.
func NewRecorder() (*tracetest.SpanRecorder, trace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	return rec, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
}
