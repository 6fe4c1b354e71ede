package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry/provider"
)

// echo answers a signature that does not check out 401, as an app that
// checks answers it, so a wrong forward.secret shows as a dead event rather
// than a done one; a genuine one gets --fail-first 500s, then 200.
func TestEchoRefusesABadSignature(t *testing.T) {
	t.Parallel()
	verifier, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{forwardSecret}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	app := httptest.NewServer(echoHandler(func(h http.Header, b []byte) error { _, err := verifier.Verify(h, b); return err }, 1, &out))
	defer app.Close()
	send := func(secret string) int {
		t.Helper()
		signer, err := provider.NewStandardWebhooksSigner(provider.Options{Secrets: []string{secret}})
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(`{"id":"evt_1"}`)
		req, _ := http.NewRequest(http.MethodPost, app.URL, bytes.NewReader(body))
		req.Header.Set("Idempotency-Key", "ferry_1")
		signer.Sign(req.Header, &provider.Message{ID: "evt_1", Body: body})
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for i, want := range []int{http.StatusUnauthorized, http.StatusInternalServerError, http.StatusOK} {
		secret := forwardSecret
		if i == 0 {
			secret = "whsec_d3JvbmctZm9yd2FyZC1zZWNyZXQ="
		}
		if got := send(secret); got != want {
			t.Errorf("request %d: %d, want %d", i, got, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i, want := range []string{"signature=INVALID bytes=14 -> 401", "signature=valid bytes=14 -> 500", "signature=valid bytes=14 -> 200"} {
		if i >= len(lines) || !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %d of\n%s\ndoes not end %q", i, out.String(), want)
		}
	}
}
