package ferryhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/internal/testtrace"
)

// The provider's own trace context, as it would send it, is
// testtrace.Traceparent with this vendor's tracestate.
const providerTracestate = "congo=t61rcWkgMzE"

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	out := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value.String()
	}
	return out
}

// oneSpan returns the only span the recorder holds. The receiver ends its
// span inside ServeHTTP, and the server sends the (short) answer once
// ServeHTTP has returned, so the span is there once the reply is.
func oneSpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	return spans[0]
}

// wantAttrs checks attributes by their emitted text.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[attribute.Key]string) {
	t.Helper()
	got := spanAttrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("span %q: %s = %q, want %q", s.Name(), k, got[k], v)
		}
	}
}

// noSecrets fails if any attribute or event attribute of s carries one of
// the tests' secrets, a signature header's value or a marker of the body.
func noSecrets(t *testing.T, s sdktrace.ReadOnlySpan, d delivery, bodyMarker string) {
	t.Helper()
	forbidden := append([]string{bodyMarker}, secrets...)
	for _, name := range sentSignatureHeaders {
		if v := d.header.Get(name); v != "" {
			forbidden = append(forbidden, v)
		}
	}
	values := spanAttrs(s)
	for _, e := range s.Events() {
		for _, kv := range e.Attributes {
			values[attribute.Key(e.Name+"/"+string(kv.Key))] = kv.Value.String()
		}
	}
	for k, v := range values {
		for _, f := range forbidden {
			if strings.Contains(v, f) {
				t.Errorf("span attribute %s = %q carries %q", k, v, f)
			}
		}
	}
}

// wantSenderLink checks that s has one link, to the sender's span, that
// carries no tracestate of the sender's.
func wantSenderLink(t *testing.T, s sdktrace.ReadOnlySpan) {
	t.Helper()
	links := s.Links()
	if len(links) != 1 {
		t.Fatalf("%d links, want one to the sender's span", len(links))
	}
	if l := links[0].SpanContext; l.TraceID().String() != testtrace.TraceID || l.SpanID().String() != testtrace.SpanID || l.TraceState().Len() != 0 {
		t.Errorf("link to %v, want the sender's span %s-%s without its tracestate", l, testtrace.TraceID, testtrace.SpanID)
	}
}

func TestReceiverTracing(t *testing.T) {
	t.Parallel()

	traced := func(t *testing.T, st ferry.Store) (*bundle, *tracetest.SpanRecorder) {
		rec, tp := testtrace.NewRecorder()
		return setup(t, st, func(o *ferryhttp.ReceiverOptions) { o.TracerProvider = tp }), rec
	}

	// Anyone can send a traceparent: the receipt span is a new root in a
	// trace of its own, linked to the sender's span (without its
	// tracestate). It tells what became of the delivery, and its own
	// context, with no tracestate of the sender's, is stored with the event.
	t.Run("SendersTraceIsALinkNotTheParent", func(t *testing.T) {
		t.Parallel()
		b, rec := traced(t, teststore.SQLite(t, nil))
		d := stripe(`{"id":"evt_traced","type":"invoice.paid","marker":"BODY-MARKER-5e1"}`).
			with("Traceparent", testtrace.Traceparent).with("Tracestate", providerTracestate)
		if r := b.send(t, d); r.status != http.StatusOK {
			t.Fatalf("answered %d %s", r.status, r.raw)
		}
		s := oneSpan(t, rec)
		if s.Name() != "POST /webhooks/{source}" || s.SpanKind() != trace.SpanKindServer {
			t.Errorf("span %q kind %v", s.Name(), s.SpanKind())
		}
		sc := s.SpanContext()
		if p := s.Parent(); p.IsValid() || sc.TraceID().String() == testtrace.TraceID {
			t.Errorf("parent %v, trace %s: want a new root in a trace of its own", p, sc.TraceID())
		}
		wantSenderLink(t, s)
		wantAttrs(t, s, map[attribute.Key]string{
			ferry.AttrSource: "stripe", ferry.AttrEventID: "evt_traced", ferry.AttrOutcome: "accepted",
			"http.response.status_code": "200", "http.request.method": "POST", "http.route": "/webhooks/{source}",
		})
		var events []string
		for _, e := range s.Events() {
			events = append(events, e.Name)
		}
		if strings.Join(events, ",") != "verified,stored" {
			t.Errorf("span events %v, want verified then stored", events)
		}
		noSecrets(t, s, d, "BODY-MARKER-5e1")

		ev := event(t, b.store, "stripe", "evt_traced")
		if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; ev.Traceparent != want || ev.Tracestate != "" {
			t.Errorf("stored trace context (%q, %q), want the receipt span's (%q, \"\")", ev.Traceparent, ev.Tracestate, want)
		}
	})

	// The sampler decides as for any root, whatever flag the sender set:
	// at ratio 0 a sampled traceparent, on a forged delivery or a genuine
	// one, exports nothing (and the event stores an unsampled context),
	// and an unsampled one does not stop Ferry from sampling its own.
	t.Run("SenderCannotChooseSampling", func(t *testing.T) {
		t.Parallel()
		sampledByFerry := func(t *testing.T, sampler sdktrace.Sampler, flags string, id string, forged bool) (*tracetest.InMemoryExporter, *bundle) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSyncer(exp))
			b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) { o.TracerProvider = tp })
			d, want := stripe(`{"id":"`+id+`"}`), http.StatusOK
			if forged {
				d, want = stripeAt("whsec_wrong", `{"id":"`+id+`"}`, testNow), http.StatusUnauthorized
			}
			d = d.with("Traceparent", "00-"+testtrace.TraceID+"-"+testtrace.SpanID+"-"+flags).with("Tracestate", providerTracestate)
			if r := b.send(t, d); r.status != want {
				t.Fatalf("answered %d %s, want %d", r.status, r.raw, want)
			}
			return exp, b
		}
		never := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))
		for _, forged := range []bool{true, false} {
			// The span ends before the answer is written, and the syncer
			// exports as it ends: what the exporter lacks now, it never gets.
			exp, b := sampledByFerry(t, never, "01", "evt_ratio0", forged)
			if spans := exp.GetSpans(); len(spans) != 0 {
				t.Errorf("forged %v: ratio 0 exported %d spans, the first in trace %s", forged, len(spans), spans[0].SpanContext.TraceID())
			}
			if ev := event(t, b.store, "stripe", "evt_ratio0"); !forged && (ev == nil || strings.Contains(ev.Traceparent, testtrace.TraceID) || !strings.HasSuffix(ev.Traceparent, "-00") || ev.Tracestate != "") {
				t.Errorf("stored %+v, want a traceparent of Ferry's own, unsampled, and no tracestate", ev)
			}
		}
		exp, _ := sampledByFerry(t, sdktrace.ParentBased(sdktrace.AlwaysSample()), "00", "evt_always", false)
		if spans := exp.GetSpans(); len(spans) != 1 || spans[0].SpanContext.TraceID().String() == testtrace.TraceID {
			t.Errorf("always on, unsampled traceparent: exported %d spans, want 1 in a trace of its own", len(spans))
		}
	})

	// A span the program's own middleware put in the request's context is
	// the receipt's parent (the program trusts it; the sender cannot put
	// one there). Its tracestate, too long for a store, is dropped and the
	// delivery stored, with its traceparent.
	t.Run("ChildOfTheProgramsSpan", func(t *testing.T) {
		t.Parallel()
		rec, tp := testtrace.NewRecorder()
		st := teststore.SQLite(t, nil)
		recv, err := ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{Store: st, Sources: sources(t), TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		var members []string
		for _, k := range []string{"a", "b", "c"} {
			members = append(members, k+"="+strings.Repeat("v", 250))
		}
		long, err := trace.ParseTraceState(strings.Join(members, ","))
		if err != nil {
			t.Fatal(err)
		}
		programs := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: long,
		})
		mux := http.NewServeMux()
		recv.Register(mux)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mux.ServeHTTP(w, r.WithContext(trace.ContextWithRemoteSpanContext(r.Context(), programs)))
		}))
		t.Cleanup(srv.Close)
		b := &bundle{store: st, srv: srv}
		if r := b.send(t, stripe(`{"id":"evt_program"}`).with("Traceparent", testtrace.Traceparent)); r.status != http.StatusOK {
			t.Fatalf("answered %d %s", r.status, r.raw)
		}
		s := oneSpan(t, rec)
		if p := s.Parent(); p.TraceID() != programs.TraceID() || p.SpanID() != programs.SpanID() {
			t.Errorf("parent %v, want the program's span %v", p, programs)
		}
		wantSenderLink(t, s)
		if ev := event(t, b.store, "stripe", "evt_program"); !strings.Contains(ev.Traceparent, programs.TraceID().String()) || ev.Tracestate != "" {
			t.Errorf("stored (%q, %q), want the traceparent alone", ev.Traceparent, ev.Tracestate)
		}
	})

	t.Run("RootWithoutATraceparent", func(t *testing.T) {
		t.Parallel()
		b, rec := traced(t, teststore.SQLite(t, nil))
		if r := b.send(t, stripe(`{"id":"evt_root"}`)); r.status != http.StatusOK {
			t.Fatalf("answered %d", r.status)
		}
		s := oneSpan(t, rec)
		if s.Parent().IsValid() || len(s.Links()) != 0 {
			t.Errorf("parent = %v, links %v, want neither", s.Parent(), s.Links())
		}
		if ev := event(t, b.store, "stripe", "evt_root"); !strings.Contains(ev.Traceparent, s.SpanContext().TraceID().String()) {
			t.Errorf("stored traceparent %q, want the receipt's trace %s", ev.Traceparent, s.SpanContext().TraceID())
		}
	})

	// A refusal is traced with its reason; it is the sender's error, not
	// Ferry's, so the span is not an error.
	t.Run("RefusalHasItsReason", func(t *testing.T) {
		t.Parallel()
		b, rec := traced(t, teststore.SQLite(t, nil))
		d := stripeAt("whsec_wrong", `{"id":"evt_forged"}`, testNow)
		if r := b.send(t, d); r.status != http.StatusUnauthorized {
			t.Fatalf("answered %d", r.status)
		}
		s := oneSpan(t, rec)
		wantAttrs(t, s, map[attribute.Key]string{
			ferry.AttrOutcome: "rejected", ferry.AttrReason: "bad_signature", "http.response.status_code": "401",
		})
		if s.Status().Code == codes.Error || len(s.Events()) != 0 {
			t.Errorf("refusal: status %+v events %v, want no error and no phase", s.Status(), s.Events())
		}
		noSecrets(t, s, d, "evt_forged")
	})

	t.Run("StoreFailureIsAnError", func(t *testing.T) {
		t.Parallel()
		b, rec := traced(t, &failingStore{Store: teststore.SQLite(t, nil), receive: func(context.Context, *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
			return nil, errors.New("disk on fire")
		}})
		if r := b.send(t, stripe(`{"id":"evt_down"}`)); r.status != http.StatusServiceUnavailable {
			t.Fatalf("answered %d", r.status)
		}
		s := oneSpan(t, rec)
		wantAttrs(t, s, map[attribute.Key]string{ferry.AttrOutcome: "unavailable", ferry.AttrReason: "store_unavailable", "http.response.status_code": "503"})
		if s.Status().Code != codes.Error {
			t.Errorf("status %+v, want an error", s.Status())
		}
	})

	// A source that is not configured is not named: senders do not choose
	// attribute values.
	t.Run("UnknownSourceIsNotNamed", func(t *testing.T) {
		t.Parallel()
		b, rec := traced(t, teststore.SQLite(t, nil))
		if r := b.send(t, delivery{source: "made-up-by-sender", body: []byte(`{}`)}); r.status != http.StatusNotFound {
			t.Fatalf("answered %d", r.status)
		}
		s := oneSpan(t, rec)
		if got := spanAttrs(s); got[ferry.AttrSource] != "" || got[ferry.AttrReason] != "unknown_source" {
			t.Errorf("attributes %v, want no source and reason unknown_source", got)
		}
	})

	// Untraced, the receiver reads no trace header and stores none.
	t.Run("OffStoresNoTraceContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t, teststore.SQLite(t, nil), nil)
		d := stripe(`{"id":"evt_off"}`).with("Traceparent", testtrace.Traceparent)
		if r := b.send(t, d); r.status != http.StatusOK {
			t.Fatalf("answered %d", r.status)
		}
		if ev := event(t, b.store, "stripe", "evt_off"); ev.Traceparent != "" || ev.Tracestate != "" {
			t.Errorf("untraced receiver stored (%q, %q)", ev.Traceparent, ev.Tracestate)
		}
	})
}

func TestForwarderTracing(t *testing.T) {
	t.Parallel()

	// parent is the attempt's span, as a traced Client runs the handler in.
	parent := func(t *testing.T, tp trace.TracerProvider) (context.Context, trace.Span) {
		ts, err := trace.ParseTraceState(providerTracestate)
		if err != nil {
			t.Fatal(err)
		}
		ctx, span := tp.Tracer("test").Start(context.Background(), "ferry.attempt")
		sc := span.SpanContext().WithTraceState(ts)
		return trace.ContextWithSpanContext(ctx, sc), span
	}

	// The forward is a client span, a child of the attempt; the app gets
	// its traceparent (the forward span's context) and the tracestate, so
	// the app's spans join the trace. The span's URL has no path or query.
	t.Run("ClientSpanAndTraceparentToTheApp", func(t *testing.T) {
		t.Parallel()
		srv, got := app(t, nil)
		rec, tp := testtrace.NewRecorder()
		f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL + "/hooks/PATH-TOKEN-7c?token=APP-TOKEN-9d", TracerProvider: tp})
		ctx, attempt := parent(t, tp)
		if err := f.Handle(ctx, testDelivery()); err != nil {
			t.Fatal(err)
		}
		attempt.End()
		r := <-got

		var fwd sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.SpanKind() == trace.SpanKindClient {
				fwd = s
			}
		}
		if fwd == nil {
			t.Fatalf("no client span among %d", len(rec.Ended()))
		}
		sc := fwd.SpanContext()
		if p := fwd.Parent(); p.SpanID() != attempt.SpanContext().SpanID() || sc.TraceID() != attempt.SpanContext().TraceID() {
			t.Errorf("forward span's parent %v, want the attempt %v", p, attempt.SpanContext())
		}
		if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; r.header.Get("Traceparent") != want {
			t.Errorf("app got traceparent %q, want the forward span's %q", r.header.Get("Traceparent"), want)
		}
		if r.header.Get("Tracestate") != providerTracestate {
			t.Errorf("app got tracestate %q, want %q", r.header.Get("Tracestate"), providerTracestate)
		}
		wantAttrs(t, fwd, map[attribute.Key]string{
			"http.request.method": "POST", "http.response.status_code": "200", "url.full": srv.URL,
			"server.address": "127.0.0.1", "server.port": srv.URL[strings.LastIndex(srv.URL, ":")+1:],
		})
		if fwd.Name() != "POST" || fwd.Status().Code == codes.Error {
			t.Errorf("forward span %q status %+v", fwd.Name(), fwd.Status())
		}
	})

	// A refusal (4xx) is an error of the span as a failure (5xx) is.
	for _, status := range []int{http.StatusNotFound, http.StatusBadGateway} {
		code := strconv.Itoa(status)
		t.Run("AppErrorIsAnError/"+code, func(t *testing.T) {
			t.Parallel()
			srv, _ := app(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })
			rec, tp := testtrace.NewRecorder()
			f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL, TracerProvider: tp})
			if err := f.Handle(context.Background(), testDelivery()); err == nil {
				t.Fatalf("a %d forwarded without error", status)
			}
			s := oneSpan(t, rec)
			wantAttrs(t, s, map[attribute.Key]string{"http.response.status_code": code, "error.type": code})
			if s.Status().Code != codes.Error {
				t.Errorf("status %+v, want an error", s.Status())
			}
		})
	}

	// Untraced, the forwarder sends no trace header, whatever span the
	// handler's context holds.
	t.Run("OffSendsNoTraceparent", func(t *testing.T) {
		t.Parallel()
		srv, got := app(t, nil)
		_, tp := testtrace.NewRecorder()
		f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL})
		ctx, span := parent(t, tp)
		defer span.End()
		if err := f.Handle(ctx, testDelivery()); err != nil {
			t.Fatal(err)
		}
		if r := <-got; r.header.Get("Traceparent") != "" || r.header.Get("Tracestate") != "" {
			t.Errorf("untraced forwarder sent traceparent %q tracestate %q", r.header.Get("Traceparent"), r.header.Get("Tracestate"))
		}
	})
}
