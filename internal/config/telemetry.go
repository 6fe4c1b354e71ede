package config

import (
	"fmt"
	"math"
	"net/url"
	"strings"
)

// Telemetry is tracing with OpenTelemetry, exported over OTLP. It is off
// unless OTLPEndpoint is set here or an OTLP endpoint is set in the
// environment (docs/configuration.md says which OTEL_* variables count and
// which side wins).
type Telemetry struct {
	// OTLPEndpoint is the collector's base URL: "http://127.0.0.1:4318" for
	// protocol "http" (spans are POSTed to its /v1/traces), or
	// "http://127.0.0.1:4317" for "grpc". https means TLS. Setting it turns
	// tracing on. Credentials go in OTEL_EXPORTER_OTLP_HEADERS: a user and
	// password in the URL are refused, since the exporter would drop them.
	OTLPEndpoint string `toml:"otlp_endpoint"`
	// Protocol is "http" (OTLP/HTTP with protobuf) or "grpc". Defaults to
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL,
	// else "http".
	Protocol string `toml:"protocol"`
	// ServiceName is service.name in every span's resource. Defaults to
	// OTEL_SERVICE_NAME, else "ferry".
	ServiceName string `toml:"service_name"`
	// SamplingRatio is the share of receipts traced, from 0 to 1; a
	// sender's traceparent is only linked to, never followed, and an
	// attempt follows its receipt's. Defaults to OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG, else 1.
	SamplingRatio *float64 `toml:"sampling_ratio"`
}

// Telemetry protocols.
const (
	ProtocolHTTP = "http"
	ProtocolGRPC = "grpc"
)

func (c *Config) validateTelemetry() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("telemetry.%s: "+format, append([]any{key}, args...)...))
	}
	t := c.Telemetry
	if t.OTLPEndpoint != "" {
		u, err := url.Parse(t.OTLPEndpoint)
		if err == nil && u.User != nil {
			// The exporter drops a URL's userinfo: the collector would
			// answer 401 to every batch. Not echoed: the user may be a key.
			bad("otlp_endpoint", "carries credentials before its \"@\", which the OTLP exporter never sends: remove them and set the environment variable OTEL_EXPORTER_OTLP_HEADERS instead, e.g. \"Authorization=Basic <base64 of user:password>\" or your vendor's API key header")
		} else if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			bad("otlp_endpoint", "%s", notHTTPURL(t.OTLPEndpoint, "is not the collector's base URL", `write it like "http://127.0.0.1:4318" (protocol "http") or "http://127.0.0.1:4317" (protocol "grpc"), https for TLS`))
		} else if strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/v1/traces") {
			// The exporter appends /v1/traces: spans would go to
			// /v1/traces/v1/traces and be lost.
			bad("otlp_endpoint", "%q ends in /v1/traces, which the exporter appends to the base URL: remove it, e.g. \"http://127.0.0.1:4318\"", RedactURL(t.OTLPEndpoint))
		}
	}
	switch t.Protocol {
	case "", ProtocolHTTP, ProtocolGRPC:
	default:
		bad("protocol", "%q: use \"http\" (OTLP/HTTP, port 4318) or \"grpc\" (port 4317)", t.Protocol)
	}
	if r := t.SamplingRatio; r != nil && (math.IsNaN(*r) || *r < 0 || *r > 1) {
		bad("sampling_ratio", "is %v: use a number from 0 (no new trace) to 1 (every one), e.g. 0.1 for one in ten", *r)
	}
	return errs
}
