package main

import (
	"testing"

	"github.com/ferry-inbox/ferry/internal/config"
)

// TestSendSignsAsEachProvider: what `ferry send` signs for a source
// verifies under the verifier `ferry serve` builds for it from the same
// config, for every provider.
func TestSendSignsAsEachProvider(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{}
	for _, src := range []config.Source{
		{Name: "stripe", Provider: "stripe", Secrets: []string{"whsec_stripe"}},
		{Name: "github", Provider: "github", Secrets: []string{"gh-secret", "gh-old"}},
		{Name: "shopify", Provider: "shopify", Secrets: []string{"shop-secret"}},
		{Name: "sw", Provider: "standardwebhooks", Secrets: []string{"whsec_c2VuZC10ZXN0"}},
		{Name: "hmac-header", Provider: "hmac", Secrets: []string{"acme"}, HMAC: config.HMAC{
			Header: "X-Acme-Signature", Prefix: "sha256=", EventIDHeader: "X-Acme-Id", TypeHeader: "X-Acme-Type"}},
		{Name: "hmac-id-timestamp", Provider: "hmac", Secrets: []string{"acme"}, HMAC: config.HMAC{
			Header: "X-Acme-Signature", EventIDHeader: "X-Acme-Id", TypeField: "kind",
			Mode: "id.timestamp.body", TimestampHeader: "X-Acme-Timestamp"}},
		{Name: "hmac-field", Provider: "hmac", Secrets: []string{"acme"}, HMAC: config.HMAC{
			Header: "X-Acme-Signature", Encoding: "base64", Algorithm: "sha1", EventIDField: "event_id", TypeField: "kind"}},
	} {
		t.Run(src.Name, func(t *testing.T) {
			t.Parallel()
			body, err := sampleBody("", &src, "evt_send_1", "demo.event")
			if err != nil {
				t.Fatal(err)
			}
			header, err := sign(&src, "evt_send_1", "demo.event", body)
			if err != nil {
				t.Fatal(err)
			}
			v, err := cfg.Verifier(src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Verify(header, body)
			if err != nil || got.EventID != "evt_send_1" || got.Type != "demo.event" {
				t.Fatalf("Verify = %+v, %v", got, err)
			}
			if header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type = %q", header.Get("Content-Type"))
			}
		})
	}
}
