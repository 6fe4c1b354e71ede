package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/config"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// collectedSpan is one span an OTLP endpoint received, with its resource's
// service.name.
type collectedSpan struct {
	service string
	span    *tracepb.Span
}

// otlpCollector is a local OTLP/HTTP endpoint: it decodes each
// ExportTraceServiceRequest (protobuf) POSTed to /v1/traces and keeps the
// spans.
type otlpCollector struct {
	mu    sync.Mutex
	spans []collectedSpan
	srv   *httptest.Server
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	c := &otlpCollector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			t.Errorf("collector got %s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("collector: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		c.add(&req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *otlpCollector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := attrString(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, collectedSpan{service: service, span: s})
			}
		}
	}
}

func (c *otlpCollector) collected() []collectedSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]collectedSpan(nil), c.spans...)
}

func attrString(attrs []*commonpb.KeyValue, key string) string {
	for _, kv := range attrs {
		if kv.GetKey() == key {
			if v := kv.GetValue(); v.GetStringValue() != "" {
				return v.GetStringValue()
			}
			return fmt.Sprint(kv.GetValue().GetIntValue())
		}
	}
	return ""
}

// TestServeTracesEndToEnd runs `ferry serve` with [telemetry] pointing at a
// local OTLP/HTTP endpoint: one delivery, carrying the provider's
// traceparent and tracestate, fails once at the app and then succeeds. One
// trace of Ferry's own must hold the receipt span (a root, linked to the
// provider's span), both attempt spans (children of the receipt, linked to
// it) and both forward spans (children of their attempts), and the app
// must have received traceparents of that trace naming the forward spans,
// and no tracestate. The batch processor's delay is set past the test's
// end, so the spans arrive only through the flush at shutdown.
func TestServeTracesEndToEnd(t *testing.T) {
	t.Parallel()
	collector := newOTLPCollector(t)

	var (
		mu           sync.Mutex
		traceparents []string
		tracestates  []string
	)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		traceparents = append(traceparents, r.Header.Get("Traceparent"))
		tracestates = append(tracestates, r.Header.Get("Tracestate"))
		n := len(traceparents)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(app.Close)

	dbPath := filepath.Join(t.TempDir(), "ferry.db")
	cfgPath := writeConfig(t, "sqlite:"+dbPath, app.URL+"/hooks", "")
	writeFile(t, cfgPath, readFile(t, cfgPath)+fmt.Sprintf(`
[telemetry]
otlp_endpoint = %q
protocol = "http"
service_name = "ferry-e2e"
sampling_ratio = 1.0
`, collector.srv.URL))
	p := startServeWith(t, ferryBin, []string{"OTEL_BSP_SCHEDULE_DELAY=600000", "OTEL_SERVICE_NAME=not-this-one"}, cfgPath)

	const (
		providerTraceID = "0af7651916cd43dd8448eb211c80319c"
		providerSpanID  = "b7ad6b7169203331"
	)
	body := []byte(`{"id":"evt_traced","type":"invoice.paid","data":{}}`)
	req, err := http.NewRequest(http.MethodPost, "http://"+p.addr+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = ferrytest.SignStripe(stripeSecret, body, time.Now())
	req.Header.Set("Traceparent", "00-"+providerTraceID+"-"+providerSpanID+"-01")
	req.Header.Set("Tracestate", "provider=PROVIDERSTATE")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("delivery answered %d", resp.StatusCode)
	}

	st := teststore.OpenSQLite(t, dbPath, nil)
	waitDone(t, st, "evt_traced")
	if n := len(collector.collected()); n != 0 {
		t.Fatalf("%d spans exported before shutdown; the test needs the batch delay to hold them", n)
	}

	p.terminate(t)
	if p.err != nil {
		t.Fatalf("ferry serve exited with %v", p.err)
	}

	spans := collector.collected()
	var receipt *tracepb.Span
	var attempts, forwards []*tracepb.Span
	for _, cs := range spans {
		s := cs.span
		if cs.service != "ferry-e2e" {
			t.Errorf("span %q of service %q, want ferry-e2e (service_name wins over OTEL_SERVICE_NAME)", s.GetName(), cs.service)
		}
		if s.GetTraceState() != "" {
			t.Errorf("span %q has tracestate %q, want none", s.GetName(), s.GetTraceState())
		}
		switch s.GetKind() {
		case tracepb.Span_SPAN_KIND_SERVER:
			receipt = s
		case tracepb.Span_SPAN_KIND_CONSUMER:
			attempts = append(attempts, s)
		case tracepb.Span_SPAN_KIND_CLIENT:
			forwards = append(forwards, s)
		}
	}
	if receipt == nil || len(attempts) != 2 || len(forwards) != 2 || len(spans) != 5 {
		t.Fatalf("exported %d spans: receipt %v, %d attempts, %d forwards; want 1, 2 and 2", len(spans), receipt != nil, len(attempts), len(forwards))
	}
	ferryTraceID := hex.EncodeToString(receipt.GetTraceId())
	if len(receipt.GetParentSpanId()) != 0 || ferryTraceID == providerTraceID || receipt.GetName() != "POST /webhooks/{source}" {
		t.Errorf("receipt span %q in trace %s has parent %x, want a root in a trace of its own", receipt.GetName(), ferryTraceID, receipt.GetParentSpanId())
	}
	if links := receipt.GetLinks(); len(links) != 1 || hex.EncodeToString(links[0].GetTraceId()) != providerTraceID ||
		hex.EncodeToString(links[0].GetSpanId()) != providerSpanID || links[0].GetTraceState() != "" {
		t.Errorf("receipt links %v, want one to the provider's span %s, without its tracestate", links, providerSpanID)
	}
	for _, cs := range spans {
		if got := hex.EncodeToString(cs.span.GetTraceId()); got != ferryTraceID {
			t.Errorf("span %q in trace %s, want the receipt's %s", cs.span.GetName(), got, ferryTraceID)
		}
	}
	if got := attrString(receipt.GetAttributes(), "ferry.outcome"); got != "accepted" {
		t.Errorf("receipt outcome %q", got)
	}

	forwardOf := map[string]*tracepb.Span{} // attempt span id → its forward
	for _, f := range forwards {
		forwardOf[hex.EncodeToString(f.GetParentSpanId())] = f
	}
	wantOutcome := map[string]string{"1": "failed", "2": "done"}
	for _, a := range attempts {
		n := attrString(a.GetAttributes(), "ferry.attempt")
		if got := attrString(a.GetAttributes(), "ferry.outcome"); got != wantOutcome[n] {
			t.Errorf("attempt %s outcome %q, want %q", n, got, wantOutcome[n])
		}
		if !bytes.Equal(a.GetParentSpanId(), receipt.GetSpanId()) {
			t.Errorf("attempt %s has parent %x, want the receipt %x", n, a.GetParentSpanId(), receipt.GetSpanId())
		}
		if links := a.GetLinks(); len(links) != 1 || !bytes.Equal(links[0].GetSpanId(), receipt.GetSpanId()) || !bytes.Equal(links[0].GetTraceId(), receipt.GetTraceId()) {
			t.Errorf("attempt %s links %v, want one to the receipt %x", n, links, receipt.GetSpanId())
		}
		if forwardOf[hex.EncodeToString(a.GetSpanId())] == nil {
			t.Errorf("attempt %s has no forward span under it", n)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(traceparents) != 2 {
		t.Fatalf("app got %d requests, want 2", len(traceparents))
	}
	for i, tp := range traceparents {
		if tracestates[i] != "" {
			t.Errorf("request %d: tracestate %q, want none", i+1, tracestates[i])
		}
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != ferryTraceID {
			t.Errorf("request %d: traceparent %q, want trace %s", i+1, tp, ferryTraceID)
			continue
		}
		found := false
		for _, f := range forwards {
			found = found || hex.EncodeToString(f.GetSpanId()) == parts[2]
		}
		if !found {
			t.Errorf("request %d: traceparent %q names no forward span", i+1, tp)
		}
	}
}

// TestServeSenderCannotForceSampling is the security review's case against
// `ferry serve` at sampling_ratio = 0: a forged delivery and a genuine one,
// both carrying a sampled traceparent and a tracestate of the sender's.
// Nothing may be exported (the flush at shutdown sends whatever was
// sampled), the event must store a trace context of Ferry's own, and the
// app must get neither the sender's trace id nor its tracestate.
func TestServeSenderCannotForceSampling(t *testing.T) {
	t.Parallel()
	collector := newOTLPCollector(t)
	got := make(chan http.Header, 1)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case got <- r.Header.Clone():
		default:
		}
	}))
	t.Cleanup(app.Close)

	dbPath := filepath.Join(t.TempDir(), "ferry.db")
	cfgPath := writeConfig(t, "sqlite:"+dbPath, app.URL+"/hooks", "")
	writeFile(t, cfgPath, readFile(t, cfgPath)+fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\nsampling_ratio = 0.0\n", collector.srv.URL))
	p := startServeWith(t, ferryBin, []string{"OTEL_BSP_SCHEDULE_DELAY=600000"}, cfgPath)

	const (
		senderTraceID = "0af7651916cd43dd8448eb211c80319c"
		senderState   = "ATTACKERSTATE"
	)
	send := func(secret, id string, want int) {
		body := []byte(`{"id":"` + id + `","type":"invoice.paid","data":{}}`)
		req, err := http.NewRequest(http.MethodPost, "http://"+p.addr+"/webhooks/stripe", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = ferrytest.SignStripe(secret, body, time.Now())
		req.Header.Set("Traceparent", "00-"+senderTraceID+"-b7ad6b7169203331-01")
		req.Header.Set("Tracestate", "evil="+senderState)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s answered %d, want %d", id, resp.StatusCode, want)
		}
	}
	send("whsec_forged", "evt_forged", http.StatusUnauthorized)
	send(stripeSecret, "evt_genuine", http.StatusOK)

	st := teststore.OpenSQLite(t, dbPath, nil)
	waitDone(t, st, "evt_genuine")
	p.terminate(t)
	if p.err != nil {
		t.Fatalf("ferry serve exited with %v", p.err)
	}
	for _, cs := range collector.collected() {
		t.Errorf("exported span %q in trace %x at sampling_ratio 0", cs.span.GetName(), cs.span.GetTraceId())
	}
	if ev := eventState(t, st, "evt_genuine"); strings.Contains(ev.Traceparent, senderTraceID) || ev.Tracestate != "" {
		t.Errorf("stored trace context (%q, %q), want one of Ferry's own", ev.Traceparent, ev.Tracestate)
	}
	h := <-got
	if tp, ts := h.Get("Traceparent"), h.Get("Tracestate"); tp == "" || strings.Contains(tp, senderTraceID) || strings.Contains(ts, senderState) {
		t.Errorf("app got traceparent %q tracestate %q, want Ferry's trace and none of the sender's state", tp, ts)
	}
}

// planTracing: off by default; a [telemetry] key wins over its OTEL_*
// variable; a variable fills in a key left out; a bad variable stops the
// start naming it.
func TestPlanTracing(t *testing.T) {
	t.Parallel()
	ratio := 0.5
	for _, tc := range []struct {
		name      string
		telemetry config.Telemetry
		env       map[string]string
		want      tracingPlan // on, protocol, endpoint, describe
		wantErr   string
	}{
		{name: "OffByDefault", want: tracingPlan{}},
		{name: "OffWithOnlyAServiceName", env: map[string]string{"OTEL_SERVICE_NAME": "x"}, want: tracingPlan{}},
		{name: "FileEndpoint", telemetry: config.Telemetry{OTLPEndpoint: "http://c:4318/"},
			want: tracingPlan{on: true, protocol: "http", endpoint: "http://c:4318/v1/traces", describe: "parentbased_always_on"}},
		{name: "FileWinsOverEnv", telemetry: config.Telemetry{OTLPEndpoint: "https://c:4317", Protocol: "grpc", SamplingRatio: &ratio},
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_TRACES_SAMPLER": "always_off"},
			want: tracingPlan{on: true, protocol: "grpc", endpoint: "https://c:4317", describe: "parentbased_traceidratio 0.5"}},
		{name: "EnvAlone", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
			want: tracingPlan{on: true, protocol: "grpc", describe: "parentbased_traceidratio 0.1"}},
		{name: "ExporterOTLPAlone", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			want: tracingPlan{on: true, protocol: "http", describe: "parentbased_always_on"}},
		{name: "SDKDisabledWinsOverFile", telemetry: config.Telemetry{OTLPEndpoint: "http://c:4318"}, env: map[string]string{"OTEL_SDK_DISABLED": "true"}, want: tracingPlan{}},
		{name: "ExporterNoneWinsOverFile", telemetry: config.Telemetry{OTLPEndpoint: "http://c:4318"}, env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, want: tracingPlan{}},
		{name: "BadExporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "BadProtocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "BadSampler", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "sometimes"}, wantErr: "OTEL_TRACES_SAMPLER="},
		{name: "BadSamplerArg", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: "OTEL_TRACES_SAMPLER_ARG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := planTracing(tc.telemetry, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "use") {
					t.Fatalf("err = %v, want one naming %s and the fix", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.on != tc.want.on || p.protocol != tc.want.protocol || p.endpoint != tc.want.endpoint || p.describe != tc.want.describe {
				t.Errorf("plan = on %v protocol %q endpoint %q sampler %q, want %+v", p.on, p.protocol, p.endpoint, p.describe, tc.want)
			}
		})
	}
}

// A bad [telemetry] value stops serve at start, exit 2, naming the key.
func TestServeRefusesBadTelemetry(t *testing.T) {
	t.Parallel()
	cfgPath := writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), "http://127.0.0.1:1/hooks", "")
	writeFile(t, cfgPath, readFile(t, cfgPath)+"\n[telemetry]\nprotocol = \"thrift\"\n")
	_, stderr, code := runFerry(t, "serve", "--config", cfgPath)
	if code != exitUsage || !strings.Contains(stderr, "telemetry.protocol") {
		t.Errorf("exit %d, stderr %q; want 2 naming telemetry.protocol", code, stderr)
	}
}

// grpcCollector is a local OTLP/gRPC endpoint.
type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	otlp *otlpCollector
}

func (g *grpcCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.otlp.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// protocol = "grpc" exports over OTLP/gRPC to otlp_endpoint, and stop
// flushes what the batch processor holds.
func TestTracingOverGRPC(t *testing.T) {
	t.Parallel()
	lis := testhttp.Listen(t)
	collector := &grpcCollector{otlp: &otlpCollector{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, collector)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	tp, stop, err := newTracing(context.Background(), config.Telemetry{
		OTLPEndpoint: "http://" + lis.Addr().String(), Protocol: config.ProtocolGRPC, ServiceName: "ferry-grpc",
	}, func(string) string { return "" }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "over-grpc")
	span.End()
	stop()
	got := collector.otlp.collected()
	if len(got) != 1 || got[0].span.GetName() != "over-grpc" || got[0].service != "ferry-grpc" {
		t.Fatalf("collector got %d spans: %v", len(got), got)
	}
}
