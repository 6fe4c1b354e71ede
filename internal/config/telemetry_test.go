package config

import "testing"

func TestTelemetry(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "OTLP_HOST": "collector:4318"})

	t.Run("OffByDefault", func(t *testing.T) {
		t.Parallel()
		c, err := Parse([]byte(good), vars)
		if err != nil {
			t.Fatal(err)
		}
		if c.Telemetry != (Telemetry{}) {
			t.Errorf("telemetry without a [telemetry] section: %+v", c.Telemetry)
		}
	})

	t.Run("Reads", func(t *testing.T) {
		t.Parallel()
		c, err := Parse([]byte(good+`
[telemetry]
otlp_endpoint = "http://${OTLP_HOST}"
protocol = "grpc"
service_name = "ferry-eu"
sampling_ratio = 0.25
`), vars)
		if err != nil {
			t.Fatal(err)
		}
		tm := c.Telemetry
		if tm.OTLPEndpoint != "http://collector:4318" || tm.Protocol != "grpc" || tm.ServiceName != "ferry-eu" || tm.SamplingRatio == nil || *tm.SamplingRatio != 0.25 {
			t.Errorf("telemetry = %+v", tm)
		}
	})

	// Each bad value stops the start, naming the key and the fix.
	for _, tc := range []struct {
		name, section, wantKey, wantFix string
	}{
		{"EndpointNotAURL", `otlp_endpoint = "127.0.0.1:4318"`, "telemetry.otlp_endpoint", `"http://127.0.0.1:4318"`},
		{"EndpointWithQuery", `otlp_endpoint = "http://c:4318?x=1"`, "telemetry.otlp_endpoint", "base URL"},
		{"EndpointWithPassword", `otlp_endpoint = "https://user:SEKRET@otlp.example"`, "telemetry.otlp_endpoint", "OTEL_EXPORTER_OTLP_HEADERS"},
		{"EndpointWithKeyAsUser", `otlp_endpoint = "https://SEKRET@otlp.example"`, "telemetry.otlp_endpoint", "OTEL_EXPORTER_OTLP_HEADERS"},
		{"EndpointWithTracesPath", `otlp_endpoint = "http://127.0.0.1:4318/v1/traces"`, "telemetry.otlp_endpoint", "remove it"},
		{"Protocol", `protocol = "http/json"`, "telemetry.protocol", `use "http"`},
		{"RatioAboveOne", `sampling_ratio = 1.5`, "telemetry.sampling_ratio", "from 0"},
		{"NegativeRatio", `sampling_ratio = -0.1`, "telemetry.sampling_ratio", "from 0"},
		{"RatioNaN", `sampling_ratio = nan`, "telemetry.sampling_ratio", "from 0"},
		{"UnknownKey", `sample_rate = 0.5`, "telemetry.sample_rate", "spelling"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(good+"[telemetry]\n"+tc.section+"\n"), vars)
			wantInvalid(t, err, tc.wantKey, tc.wantFix, "SEKRET")
		})
	}
}
