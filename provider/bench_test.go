package provider_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

// benchBody is a 1 KB JSON event.
var benchBody = func() []byte {
	head := `{"id":"evt_1","type":"invoice.paid","data":"`
	tail := `"}`
	return []byte(head + strings.Repeat("x", 1024-len(head)-len(tail)) + tail)
}()

// benchSecrets has a retired secret first, as during a rotation, so every
// verification computes two MACs.
func benchSecrets(current string) []string { return []string{"whsec_b2xkLXNlY3JldA==", current} }

func benchVerify(b *testing.B, v ferry.Verifier, h http.Header) {
	b.Helper()
	if _, err := v.Verify(h, benchBody); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(h, benchBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStripeVerify(b *testing.B) {
	v, err := provider.NewStripe(provider.Options{Secrets: benchSecrets(fuzzSecret), Now: clock})
	if err != nil {
		b.Fatal(err)
	}
	benchVerify(b, v, ferrytest.SignStripe(fuzzSecret, benchBody, now))
}

func BenchmarkGitHubVerify(b *testing.B) {
	v, err := provider.NewGitHub(provider.Options{Secrets: benchSecrets(fuzzSecret)})
	if err != nil {
		b.Fatal(err)
	}
	benchVerify(b, v, ferrytest.SignGitHub(fuzzSecret, "d-1", "push", benchBody))
}

func BenchmarkShopifyVerify(b *testing.B) {
	v, err := provider.NewShopify(provider.Options{Secrets: benchSecrets(fuzzSecret)})
	if err != nil {
		b.Fatal(err)
	}
	benchVerify(b, v, ferrytest.SignShopify(fuzzSecret, "w-1", "orders/create", benchBody))
}

func BenchmarkStandardWebhooksVerify(b *testing.B) {
	v, err := provider.NewStandardWebhooks(provider.Options{Secrets: benchSecrets(fuzzSecret), Now: clock})
	if err != nil {
		b.Fatal(err)
	}
	h, err := ferrytest.SignStandardWebhooks(fuzzSecret, "msg_1", now, benchBody)
	if err != nil {
		b.Fatal(err)
	}
	benchVerify(b, v, h)
}

func BenchmarkHMACVerify(b *testing.B) {
	scheme := provider.HMACOptions{Header: "X-Sig", Prefix: "sha256=", EventIDField: "id", TypeField: "type"}
	v, err := provider.NewHMAC(provider.Options{Secrets: benchSecrets(fuzzSecret), HMAC: scheme})
	if err != nil {
		b.Fatal(err)
	}
	h, err := ferrytest.SignHMAC(fuzzSecret, scheme, benchBody)
	if err != nil {
		b.Fatal(err)
	}
	benchVerify(b, v, h)
}
