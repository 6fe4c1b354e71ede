package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-inbox/ferry/internal/config"
)

// Tracing of `ferry serve`: the OpenTelemetry SDK and an OTLP exporter,
// configured by [telemetry] and the standard OTEL_* variables. A key set in
// [telemetry] wins over its variable; a variable fills in a key left out.
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn tracing off
// whatever the file says. The exporters read the rest of OTEL_EXPORTER_OTLP_*
// (headers, TLS, timeout, compression) themselves; the SDK reads OTEL_BSP_*
// and the span limits.

// DefaultServiceName is service.name when neither [telemetry] service_name
// nor OTEL_SERVICE_NAME says.
const DefaultServiceName = "ferry"

// tracingFlushTimeout bounds the export of the last spans at shutdown.
const tracingFlushTimeout = 5 * time.Second

// tracingPlan is what newTracing makes of the config and the environment.
type tracingPlan struct {
	on       bool
	protocol string // config.ProtocolHTTP or config.ProtocolGRPC
	endpoint string // the exporter's URL; "" lets the exporter read OTEL_EXPORTER_OTLP_*
	sampler  sdktrace.Sampler
	describe string // the sampler, for the start line
}

// planTracing decides from t and the environment (getenv) whether and how
// to trace. Its errors name the key or the variable, and the fix.
func planTracing(t config.Telemetry, getenv func(string) string) (*tracingPlan, error) {
	p := &tracingPlan{}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return p, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporter {
	case "", "otlp":
	case "none":
		return p, nil
	default:
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: ferry exports traces over OTLP only: use \"otlp\", or \"none\" to turn tracing off", errConfig, exporter)
	}
	p.on = t.OTLPEndpoint != "" || exporter == "otlp" ||
		getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	if !p.on {
		return p, nil
	}

	p.protocol = t.Protocol
	if p.protocol == "" {
		env, name := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
		if env == "" {
			env, name = getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
		}
		switch env {
		case "", "http/protobuf", "http/json":
			p.protocol = config.ProtocolHTTP
		case "grpc":
			p.protocol = config.ProtocolGRPC
		default:
			return nil, fmt.Errorf("%w: %s=%q: use \"http/protobuf\" or \"grpc\", or set telemetry.protocol", errConfig, name, env)
		}
	}
	if t.OTLPEndpoint != "" {
		p.endpoint = t.OTLPEndpoint
		if p.protocol == config.ProtocolHTTP {
			// A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: the traces
			// path goes under it.
			p.endpoint = strings.TrimSuffix(p.endpoint, "/") + "/v1/traces"
		}
	}

	switch {
	case t.SamplingRatio != nil:
		p.sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*t.SamplingRatio))
		p.describe = "parentbased_traceidratio " + strconv.FormatFloat(*t.SamplingRatio, 'g', -1, 64)
	default:
		// The SDK reads OTEL_TRACES_SAMPLER itself, but would only log a bad
		// value and sample everything: check it here, and stop.
		name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
		arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
		switch name {
		case "":
			name = "parentbased_always_on"
		case "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		case "traceidratio", "parentbased_traceidratio":
			if arg == "" {
				break
			}
			if r, err := strconv.ParseFloat(arg, 64); err != nil || r < 0 || r > 1 {
				return nil, fmt.Errorf("%w: OTEL_TRACES_SAMPLER_ARG=%q: use a ratio from 0 to 1, e.g. 0.1, or set telemetry.sampling_ratio", errConfig, arg)
			}
			name += " " + arg
		default:
			return nil, fmt.Errorf("%w: OTEL_TRACES_SAMPLER=%q: use always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio, or set telemetry.sampling_ratio", errConfig, name)
		}
		p.describe = name
	}
	return p, nil
}

// newTracing returns the tracer provider serve hands the receiver, the
// client and the forwarders, and stop, which flushes the spans still
// buffered and shuts the exporter down. The provider is nil when tracing is
// off: then nothing is traced.
func newTracing(ctx context.Context, t config.Telemetry, getenv func(string) string, log *slog.Logger) (tp trace.TracerProvider, stop func(), err error) {
	plan, err := planTracing(t, getenv)
	if err != nil {
		return nil, nil, err
	}
	if !plan.on {
		return nil, func() {}, nil
	}
	// The SDK and the exporters report export failures here.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("ferry: tracing", "err", err)
	}))

	var exporter sdktrace.SpanExporter
	switch plan.protocol {
	case config.ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if plan.endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(plan.endpoint))
		}
		exporter, err = otlptracegrpc.New(ctx, opts...)
	default:
		var opts []otlptracehttp.Option
		if plan.endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(plan.endpoint))
		}
		exporter, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: telemetry: OTLP %s exporter: %v", errConfig, plan.protocol, err)
	}

	// Later detectors win: the default name, then OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES, then service_name.
	detectors := []resource.Option{
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(),
	}
	if t.ServiceName != "" {
		detectors = append(detectors, resource.WithAttributes(attribute.String("service.name", t.ServiceName)))
	}
	res, err := resource.New(ctx, detectors...)
	if err != nil {
		_ = exporter.Shutdown(ctx)
		return nil, nil, fmt.Errorf("%w: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %v", errConfig, err)
	}

	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)}
	if plan.sampler != nil {
		opts = append(opts, sdktrace.WithSampler(plan.sampler))
	}
	provider := sdktrace.NewTracerProvider(opts...)

	endpoint := "(from OTEL_EXPORTER_OTLP_*)"
	if plan.endpoint != "" {
		endpoint = config.RedactURL(plan.endpoint)
	}
	var service string
	if v, ok := res.Set().Value("service.name"); ok {
		service = v.String()
	}
	log.Info("ferry: tracing", "protocol", plan.protocol, "endpoint", endpoint, "service", service, "sampler", plan.describe)

	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := provider.Shutdown(ctx); err != nil {
			log.Warn("ferry: tracing: the last spans may not have been exported", "err", err)
		}
	}
	return provider, stop, nil
}
