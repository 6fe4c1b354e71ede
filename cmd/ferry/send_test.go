package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
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

// A --body file's own id is what ferry stores: send prints that id, refuses
// an --event-id that disagrees, and names --body when the file is missing.
func TestSendBodyID(t *testing.T) {
	t.Parallel()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/webhooks/stripe" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("accepted\n"))
	}))
	t.Cleanup(receiver.Close)
	cfg := writeCLIConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), "")
	body := writeTempFile(t, "body.json", `{"id":"evt_in_body","type":"invoice.paid","data":{}}`)

	out, errOut, code := runFerry(t, "send", "--config", cfg, "--source", "stripe", "--to", receiver.URL, "--body", body)
	if code != 0 || !strings.HasPrefix(out, "stripe evt_in_body -> 200 OK") {
		t.Errorf("send --body: exit %d, want the body's id printed\n%s%s", code, out, errOut)
	}
	out, errOut, code = runFerry(t, "send", "--config", cfg, "--source", "stripe", "--to", receiver.URL, "--body", body, "--event-id", "evt_flag")
	if code != exitUsage || !strings.Contains(errOut, "--event-id evt_flag, but the --body file's event id is evt_in_body") {
		t.Errorf("send --body --event-id disagreeing: exit %d, want %d naming both\n%s%s", code, exitUsage, out, errOut)
	}
	// A base URL written with its trailing slash posts to /webhooks/stripe.
	if _, errOut, code := runFerry(t, "send", "--config", cfg, "--source", "stripe", "--to", receiver.URL+"/", "--body", body, "--event-id", "evt_in_body"); code != 0 {
		t.Errorf("send --body --event-id agreeing: exit %d\n%s", code, errOut)
	}
	_, errOut, code = runFerry(t, "send", "--config", cfg, "--source", "stripe", "--to", receiver.URL, "--body", filepath.Join(t.TempDir(), "nope.json"))
	if code != exitUsage || !strings.Contains(errOut, "--body: open ") {
		t.Errorf("send with a missing --body file: exit %d, want %d naming --body\n%s", code, exitUsage, errOut)
	}
}

// A --to without its scheme is a usage error that says to write one, not
// the parser's complaint about the URL send made of it.
func TestSendToNeedsAScheme(t *testing.T) {
	t.Parallel()
	cfg := writeCLIConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), "")
	for _, to := range []string{"127.0.0.1:18080", "localhost:18080"} {
		_, errOut, code := runFerry(t, "send", "--config", cfg, "--source", "stripe", "--to", to)
		if code != exitUsage || !strings.Contains(errOut, "--to is not ferry's base URL: write it with http:// or https:// in front") {
			t.Errorf("send --to %s: exit %d, want %d and the fix\n%s", to, code, exitUsage, errOut)
		}
	}
	// The webhook URL given for the base is refused with the fix, not
	// posted to …/webhooks/stripe/webhooks/stripe for a 404.
	for _, to := range []string{"http://127.0.0.1:1/webhooks/stripe", "http://127.0.0.1:1/ferry/webhooks/"} {
		_, errOut, code := runFerry(t, "send", "--config", cfg, "--source", "stripe", "--to", to)
		if code != exitUsage || !strings.Contains(errOut, "--to is the webhook URL; give ferry's base URL (the part before /webhooks/), and send adds /webhooks/stripe") {
			t.Errorf("send --to %s: exit %d, want %d and the fix\n%s", to, code, exitUsage, errOut)
		}
	}
	// A base that a proxy mounts at /webhooks is a base: sent to (port 1
	// refuses), not refused as the webhook URL.
	if _, errOut, code := runFerry(t, "send", "--config", cfg, "--source", "stripe", "--to", "http://127.0.0.1:1/webhooks"); code != 1 || !strings.Contains(errOut, "POST http://127.0.0.1:1/webhooks/webhooks/stripe") {
		t.Errorf("send --to a base at /webhooks: exit %d, want 1 posting to /webhooks/webhooks/stripe\n%s", code, errOut)
	}
	// A --to that carries credentials keeps them out of the error when
	// nothing answers there (port 1: refused).
	_, errOut, code := runFerry(t, "send", "--config", cfg, "--source", "stripe", "--to", "http://sk_live_USER:hunter2pass@127.0.0.1:1")
	if code != 1 || strings.Contains(errOut, "sk_live_USER") || strings.Contains(errOut, "hunter2pass") || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("send --to with credentials, refused: exit %d, want 1 naming the address without its credentials\n%s", code, errOut)
	}
}
