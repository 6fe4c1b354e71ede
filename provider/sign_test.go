package provider_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

// TestSignersAgreeWithFerrytest: for every provider, provider's signer (what
// Ferry sends with) and ferrytest's (written independently, for tests) set
// the same headers, and what they sign verifies under provider.New with the
// same options.
func TestSignersAgreeWithFerrytest(t *testing.T) {
	t.Parallel()

	const secret = "whsec_c2lnbmVyLWFncmVlbWVudA==" // base64, so every provider takes it
	const id, typ = "evt_sign_1", "thing.happened"
	body := []byte(`{"id":"evt_sign_1","type":"thing.happened"}`)
	bodyScheme := provider.HMACOptions{Header: "X-Sig", Prefix: "sha256=", EventIDHeader: "X-Id", TypeHeader: "X-Type"}
	idtsScheme := provider.HMACOptions{
		Header: "X-Sig", Encoding: provider.EncodingBase64, Algorithm: provider.AlgorithmSHA1, Mode: provider.HMACModeIDTimestampBody,
		EventIDHeader: "X-Id", TimestampHeader: "X-Ts", TypeHeader: "X-Type",
	}
	must := func(h http.Header, err error) http.Header {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	withType := func(h http.Header, name string) http.Header { h.Set(name, typ); return h }

	for _, tc := range []struct {
		name    string
		scheme  provider.HMACOptions
		oracle  http.Header
		headers []string
		wantID  string
	}{
		{"stripe", provider.HMACOptions{}, ferrytest.SignStripe(secret, body, now),
			[]string{"Stripe-Signature"}, id},
		{"github", provider.HMACOptions{}, ferrytest.SignGitHub(secret, id, typ, body),
			[]string{"X-Hub-Signature-256", "X-GitHub-Delivery", "X-GitHub-Event"}, id},
		{"shopify", provider.HMACOptions{}, ferrytest.SignShopify(secret, id, typ, body),
			[]string{"X-Shopify-Hmac-Sha256", "X-Shopify-Webhook-Id", "X-Shopify-Topic"}, id},
		{"standardwebhooks", provider.HMACOptions{}, must(ferrytest.SignStandardWebhooks(secret, id, now, body)),
			[]string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}, id},
		{"hmac", bodyScheme, withType(must(ferrytest.SignHMACEvent(secret, bodyScheme, id, now, body)), "X-Type"),
			[]string{"X-Sig", "X-Id", "X-Type"}, id},
		{"hmac", idtsScheme, withType(must(ferrytest.SignHMACEvent(secret, idtsScheme, id, now, body)), "X-Type"),
			[]string{"X-Sig", "X-Id", "X-Ts", "X-Type"}, id},
	} {
		t.Run(tc.name+string(tc.scheme.Mode), func(t *testing.T) {
			t.Parallel()
			// The second secret is not signed with: the first one is.
			opts := provider.Options{Secrets: []string{secret, "whsec_b3RoZXI="}, Now: clock, HMAC: tc.scheme}
			signer, err := provider.NewSigner(tc.name, opts)
			if err != nil {
				t.Fatal(err)
			}
			got := http.Header{}
			signer.Sign(got, &provider.Message{ID: id, Type: typ, Body: body})
			for _, name := range tc.headers {
				if got.Get(name) == "" || got.Get(name) != tc.oracle.Get(name) {
					t.Errorf("%s = %q, ferrytest says %q", name, got.Get(name), tc.oracle.Get(name))
				}
			}
			opts.Secrets = opts.Secrets[:1]
			v, err := provider.New(tc.name, opts)
			if err != nil {
				t.Fatal(err)
			}
			verified, err := v.Verify(got, body)
			if err != nil || verified.EventID != tc.wantID || verified.Type != typ {
				t.Fatalf("Verify = %+v, %v", verified, err)
			}
		})
	}
}

func TestStandardWebhooksSignerPublishedVector(t *testing.T) {
	t.Parallel()
	s, err := provider.NewStandardWebhooksSigner(provider.Options{
		Secrets: []string{swVectorSecret},
		Now:     func() time.Time { return time.Unix(swVectorTimestamp, 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	s.Sign(h, &provider.Message{ID: swVectorID, Body: []byte(swVectorPayload)})
	if got := h.Get("Webhook-Signature"); got != swVectorSignature {
		t.Fatalf("Webhook-Signature = %s, want %s", got, swVectorSignature)
	}
	if h.Get("Webhook-Id") != swVectorID || h.Get("Webhook-Timestamp") != "1614265330" {
		t.Fatalf("headers = %v", h)
	}
}

// A Standard Webhooks signer given two secrets (a roll) sends one
// signature per secret, the published vector's first, and a receiver that
// knows either secret alone verifies the delivery. NewSigner, which signs
// as a provider's sender does today, uses the first only.
func TestStandardWebhooksSignerSignsWithEachSecret(t *testing.T) {
	t.Parallel()
	const next = "whsec_bmV4dC1zZWNyZXQtYWZ0ZXItdGhlLXJvbGw="
	opts := provider.Options{
		Secrets: []string{swVectorSecret, next},
		Now:     func() time.Time { return time.Unix(swVectorTimestamp, 0) },
	}
	s, err := provider.NewStandardWebhooksSigner(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	body := []byte(swVectorPayload)
	s.Sign(h, &provider.Message{ID: swVectorID, Body: body})
	sigs := strings.Fields(h.Get("Webhook-Signature"))
	if len(sigs) != 2 || sigs[0] != swVectorSignature {
		t.Fatalf("Webhook-Signature = %q, want the vector's %s and one more", h.Get("Webhook-Signature"), swVectorSignature)
	}
	for i, secret := range opts.Secrets {
		v, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{secret}, Now: opts.Now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(h, body); err != nil {
			t.Errorf("a receiver with secret %d alone: %v", i, err)
		}
	}

	first, err := provider.NewSigner("standardwebhooks", opts)
	if err != nil {
		t.Fatal(err)
	}
	h = http.Header{}
	first.Sign(h, &provider.Message{ID: swVectorID, Body: body})
	if got := h.Get("Webhook-Signature"); got != swVectorSignature {
		t.Errorf("NewSigner's Webhook-Signature = %q, want the first secret's alone, %s", got, swVectorSignature)
	}
}

func TestNewSignerErrors(t *testing.T) {
	t.Parallel()
	for _, name := range provider.Names() {
		s, err := provider.NewSigner(name, provider.Options{HMAC: provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id"}})
		if !errors.Is(err, provider.ErrInvalidOptions) || s != nil {
			t.Errorf("%s without secrets: %#v, %v, want a nil interface and ErrInvalidOptions", name, s, err)
		}
	}
	if s, err := provider.NewSigner("paypal", provider.Options{Secrets: []string{"s"}}); !errors.Is(err, provider.ErrUnknownProvider) || s != nil {
		t.Errorf("unknown provider: %#v, %v", s, err)
	}
	if _, err := provider.NewStandardWebhooksSigner(provider.Options{Secrets: []string{"whsec_!!!"}}); !errors.Is(err, provider.ErrInvalidOptions) {
		t.Errorf("bad Standard Webhooks secret: %v, want ErrInvalidOptions", err)
	}
	// Signing with the first, NewSigner still checks every secret.
	var bad *provider.SecretError
	if _, err := provider.NewSigner("standardwebhooks", provider.Options{Secrets: []string{"whsec_b2xk", "whsec_!!!"}}); !errors.As(err, &bad) || bad.Index != 1 {
		t.Errorf("NewSigner with a bad second secret: %v, want a SecretError at 1", err)
	}
}
