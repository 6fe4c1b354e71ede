package ferry_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/testtrace"
)

// A receipt's trace context as a traced receiver stores it is
// testtrace.Traceparent (sampled) with this vendor's tracestate.
const receiptTracestate = "rojo=00f067aa0ba902b7"

// waitSpans polls the recorder until n spans have ended: a span ends just
// after its verdict is committed, so the store's state comes first.
func waitSpans(t *testing.T, rec *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		spans := rec.Ended()
		if len(spans) >= n {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans ended, want %d", len(spans), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func TestClientTracing(t *testing.T) {
	t.Parallel()

	// Each attempt is a span from claim to verdict, in the receipt's trace
	// (a child of the receipt's span) and linked to it, with its number,
	// source, type and outcome; the handler runs inside it.
	withClient(t, "AttemptIsAChildOfTheReceiptAndLinksToIt", false, func(t *testing.T, b *clientBundle) {
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
			Source: "stripe", EventID: "evt_1", Type: "invoice.paid", Payload: []byte(`{"secret_payload":1}`),
			Traceparent: testtrace.Traceparent, Tracestate: receiptTracestate,
		})
		if err != nil {
			t.Fatal(err)
		}
		rec, tp := testtrace.NewRecorder()
		var (
			mu      sync.Mutex
			inSpans []trace.SpanContext
		)
		c := b.newClient(t, func(c *ferry.Config) { c.TracerProvider = tp })
		c.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			inSpans = append(inSpans, trace.SpanContextFromContext(ctx))
			if d.Attempt == 1 {
				return errors.New("downstream 500")
			}
			return nil
		})
		start(t, c)
		b.waitState(t, res.ID, ferry.StateDone)
		spans := waitSpans(t, rec, 2)
		if len(spans) != 2 {
			t.Fatalf("%d spans, want 2 (one per attempt)", len(spans))
		}

		receipt := trace.SpanContextFromContext(tracedContext(t, testtrace.Traceparent, receiptTracestate))
		mu.Lock()
		defer mu.Unlock()
		for i, s := range spans {
			a := attrs(s)
			want := map[attribute.Key]any{
				ferry.AttrAttempt: int64(i + 1), ferry.AttrSource: "stripe", ferry.AttrEventType: "invoice.paid",
				ferry.AttrEventID: "evt_1", ferry.AttrOutcome: []string{"failed", "done"}[i],
			}
			for k, v := range want {
				if a[k].AsInterface() != v {
					t.Errorf("attempt %d: %s = %v, want %v", i+1, k, a[k].AsInterface(), v)
				}
			}
			for k, v := range a {
				if strings.Contains(v.String(), "secret_payload") {
					t.Errorf("attempt %d: attribute %s carries the payload", i+1, k)
				}
			}
			if s.Name() != "ferry.attempt" || s.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("attempt %d: span %q kind %v", i+1, s.Name(), s.SpanKind())
			}
			if p := s.Parent(); p.TraceID() != receipt.TraceID() || p.SpanID() != receipt.SpanID() || !p.IsRemote() {
				t.Errorf("attempt %d: parent %v, want the receipt's span %v", i+1, p, receipt)
			}
			if links := s.Links(); len(links) != 1 || !links[0].SpanContext.Equal(receipt) {
				t.Errorf("attempt %d: links %+v, want one to the receipt %v (tracestate %q)", i+1, links, receipt, receiptTracestate)
			}
			if got := inSpans[i]; got.SpanID() != s.SpanContext().SpanID() || got.TraceID() != receipt.TraceID() {
				t.Errorf("attempt %d: the handler ran in span %v, want the attempt's %v", i+1, got, s.SpanContext())
			}
		}
		if st := spans[0].Status(); st.Code != codes.Error || st.Description != "downstream 500" {
			t.Errorf("failed attempt's status = %+v, want an error saying why", st)
		}
		if st := spans[1].Status(); st.Code == codes.Error {
			t.Errorf("done attempt's status = %+v", st)
		}
	})

	// An event received untraced gives each attempt a trace of its own: a
	// root, not a child of whatever span the caller of Start was in.
	withClient(t, "UntracedReceiptStartsARoot", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		rec, tp := testtrace.NewRecorder()
		c := b.newClient(t, func(c *ferry.Config) { c.TracerProvider = tp })
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error { return nil })
		callerCtx, callerSpan := tp.Tracer("caller").Start(context.Background(), "caller")
		if err := c.Start(callerCtx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		b.waitState(t, id, ferry.StateDone)
		s := waitSpans(t, rec, 1)[0]
		if s.Parent().IsValid() || len(s.Links()) != 0 || s.SpanContext().TraceID() == callerSpan.SpanContext().TraceID() {
			t.Errorf("attempt of an untraced receipt: parent %v links %v trace %v, want a root of its own", s.Parent(), s.Links(), s.SpanContext().TraceID())
		}
		callerSpan.End()
	})

	// Without a TracerProvider the stored trace context is not used: the
	// handler's context holds no span.
	withClient(t, "OffMakesNoSpan", false, func(t *testing.T, b *clientBundle) {
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte(`{}`), Traceparent: testtrace.Traceparent})
		if err != nil {
			t.Fatal(err)
		}
		var got trace.SpanContext
		c := b.newClient(t, nil)
		c.Handle("stripe", func(ctx context.Context, _ *ferry.Delivery) error {
			got = trace.SpanContextFromContext(ctx)
			return nil
		})
		start(t, c)
		b.waitState(t, res.ID, ferry.StateDone)
		if got.IsValid() {
			t.Errorf("untraced client ran the handler in span %v", got)
		}
	})
}

func tracedContext(t *testing.T, traceparent, tracestate string) context.Context {
	t.Helper()
	ts, err := trace.ParseTraceState(tracestate)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(traceparent, "-")
	tid, _ := trace.TraceIDFromHex(parts[1])
	sid, _ := trace.SpanIDFromHex(parts[2])
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

// TestLibraryImportsNoSDK: the library takes the OpenTelemetry API only;
// the SDK, the exporters and gRPC are the program's choice (cmd/ferry).
func TestLibraryImportsNoSDK(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".", "./ferryhttp").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(pkg, "go.opentelemetry.io/otel/exporters") ||
			strings.HasPrefix(pkg, "google.golang.org/grpc") {
			t.Errorf("the library imports %s", pkg)
		}
	}
}
