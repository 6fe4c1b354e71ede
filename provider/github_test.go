package provider_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

// TestGitHubPublishedVector checks the example of GitHub's "Validating
// webhook deliveries" documentation.
func TestGitHubPublishedVector(t *testing.T) {
	t.Parallel()

	const secret = "It's a Secret to Everybody"
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	body := []byte("Hello, World!")

	h := ferrytest.SignGitHub(secret, "d-1", "ping", body)
	if got := h.Get("X-Hub-Signature-256"); got != want {
		t.Fatalf("signer: %s, want %s", got, want)
	}
	v, err := provider.NewGitHub(provider.Options{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	h = http.Header{}
	h.Set("X-Hub-Signature-256", want)
	h.Set("X-GitHub-Delivery", "d-1")
	h.Set("X-GitHub-Event", "ping")
	got, err := v.Verify(h, body)
	if err != nil || got.EventID != "d-1" || got.Type != "ping" {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
}

func TestGitHub(t *testing.T) {
	t.Parallel()

	const secret, oldSecret = "new-secret", "old-secret"
	body := []byte(`{"zen":"Keep it logically awesome."}`)
	v, err := provider.NewGitHub(provider.Options{Secrets: []string{secret, oldSecret}})
	if err != nil {
		t.Fatal(err)
	}
	signed := ferrytest.SignGitHub(secret, "72d3162e", "push", body)
	h := func(value string) http.Header { return with(signed, "X-Hub-Signature-256", value) }

	runCases(t, v, []string{secret, oldSecret}, []verifyCase{
		{name: "Valid", header: signed, body: body, wantID: "72d3162e"},
		{name: "OldSecret", header: ferrytest.SignGitHub(oldSecret, "72d3162e", "push", body), body: body, wantID: "72d3162e", wantSecret: 1},
		{name: "UppercaseHex", header: h("sha256=" + strings.ToUpper(signed.Get("X-Hub-Signature-256")[len("sha256="):])), body: body, wantID: "72d3162e"},
		{name: "MissingHeader", header: h(""), body: body, want: ferry.ErrNoSignature},
		{name: "NoPrefix", header: h(signed.Get("X-Hub-Signature-256")[len("sha256="):]), body: body, want: ferry.ErrMalformedSignature},
		{name: "SHA1Prefix", header: h("sha1=0123"), body: body, want: ferry.ErrMalformedSignature},
		{name: "NotHex", header: h("sha256=xyz"), body: body, want: ferry.ErrMalformedSignature},
		{name: "Short", header: h("sha256=abcd"), body: body, want: ferry.ErrMalformedSignature},
		{name: "WrongSecret", header: ferrytest.SignGitHub("guess", "72d3162e", "push", body), body: body, want: ferry.ErrBadSignature},
		{name: "TamperedBody", header: signed, body: []byte(`{}`), want: ferry.ErrBadSignature},
		{name: "MissingDelivery", header: with(signed, "X-GitHub-Delivery", ""), body: body, want: ferry.ErrNoEventID},
		{name: "ForgeryWithoutDelivery", header: with(ferrytest.SignGitHub("guess", "", "push", body), "X-GitHub-Delivery", ""), body: body, want: ferry.ErrBadSignature},
	})
}
