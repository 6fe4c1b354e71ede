package ferrytest_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

func TestNewRequest(t *testing.T) {
	t.Parallel()

	body := []byte(`{"id":"evt_1"}`)
	header := ferrytest.SignStripe("whsec_x", body, time.Unix(1_700_000_000, 0))
	req := ferrytest.NewRequest("http://example.com/hooks?source=stripe", header, body)

	if req.Method != http.MethodPost || req.URL.Path != "/hooks" || req.Host != "example.com" {
		t.Fatalf("request = %s %s (host %s)", req.Method, req.URL, req.Host)
	}
	if got, want := req.Header.Get("Stripe-Signature"), header.Get("Stripe-Signature"); got != want {
		t.Fatalf("Stripe-Signature = %q, want %q", got, want)
	}
	got, err := io.ReadAll(req.Body)
	if err != nil || string(got) != string(body) {
		t.Fatalf("body = %q, %v", got, err)
	}
	// The request's header is a copy: changing it leaves the caller's alone.
	req.Header.Set("Stripe-Signature", "changed")
	if header.Get("Stripe-Signature") == "changed" {
		t.Fatal("NewRequest shares the caller's header")
	}
}

func TestSignHMACErrors(t *testing.T) {
	t.Parallel()
	for _, scheme := range []provider.HMACOptions{
		{},
		{Header: "X-Sig", Encoding: "base32"},
		{Header: "X-Sig", Algorithm: "md5"},
	} {
		if _, err := ferrytest.SignHMAC("s", scheme, nil); err == nil {
			t.Errorf("SignHMAC(%+v) did not fail", scheme)
		}
	}
}

func TestSignHMACEventErrors(t *testing.T) {
	t.Parallel()
	idts := provider.HMACOptions{Header: "X-Sig", Mode: provider.HMACModeIDTimestampBody, EventIDHeader: "X-Id", TimestampHeader: "X-Ts"}
	if _, err := ferrytest.SignHMAC("s", idts, nil); err == nil {
		t.Error("SignHMAC signed an id-and-timestamp scheme as body only")
	}
	noTS := idts
	noTS.TimestampHeader = ""
	unknown := idts
	unknown.Mode = "other"
	for _, scheme := range []provider.HMACOptions{noTS, unknown, {Mode: provider.HMACModeIDTimestampBody, TimestampHeader: "X-Ts"}} {
		if _, err := ferrytest.SignHMACEvent("s", scheme, "e-1", time.Unix(1, 0), nil); err == nil {
			t.Errorf("SignHMACEvent(%+v) did not fail", scheme)
		}
	}
	h, err := ferrytest.SignHMACEvent("s", idts, "e-1", time.Unix(1_700_000_000, 0), nil)
	if err != nil || h.Get("X-Id") != "e-1" || h.Get("X-Ts") != "1700000000" || h.Get("X-Sig") == "" {
		t.Fatalf("SignHMACEvent = %v, %v", h, err)
	}
}
