package provider_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

func TestHMAC(t *testing.T) {
	t.Parallel()

	const secret, oldSecret = "new-secret", "old-secret"
	body := []byte(`{"event_id":"e-1","seq":42,"kind":"order.paid","nested":{"id":"x"}}`)

	newVerifier := func(t *testing.T, scheme provider.HMACOptions) *provider.HMAC {
		t.Helper()
		v, err := provider.NewHMAC(provider.Options{Secrets: []string{secret, oldSecret}, HMAC: scheme})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sign := func(t *testing.T, secret string, scheme provider.HMACOptions, body []byte) http.Header {
		t.Helper()
		h, err := ferrytest.SignHMAC(secret, scheme, body)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	t.Run("IDFromHeader", func(t *testing.T) {
		t.Parallel()
		scheme := provider.HMACOptions{Header: "X-Signature", Prefix: "sha256=", EventIDHeader: "X-Event-Id", TypeHeader: "X-Event-Type"}
		v := newVerifier(t, scheme)
		signed := sign(t, secret, scheme, body)
		signed.Set("X-Event-Id", "h-1")
		signed.Set("X-Event-Type", "order.paid")
		got, err := v.Verify(signed, body)
		if err != nil || got.EventID != "h-1" || got.Type != "order.paid" {
			t.Fatalf("Verify = %+v, %v", got, err)
		}
		h := func(value string) http.Header { return with(signed, "X-Signature", value) }
		runCases(t, v, []string{secret, oldSecret}, []verifyCase{
			{name: "OldSecret", header: with(sign(t, oldSecret, scheme, body), "X-Event-Id", "h-1"), body: body, wantID: "h-1"},
			{name: "NotJSONBody", header: with(sign(t, secret, scheme, []byte("a=b")), "X-Event-Id", "h-2"), body: []byte("a=b"), wantID: "h-2"},
			{name: "MissingHeader", header: h(""), body: body, want: ferry.ErrNoSignature},
			{name: "NoPrefix", header: h(signed.Get("X-Signature")[len("sha256="):]), body: body, want: ferry.ErrMalformedSignature},
			{name: "NotHex", header: h("sha256=nothex"), body: body, want: ferry.ErrMalformedSignature},
			{name: "WrongSecret", header: with(sign(t, "guess", scheme, body), "X-Event-Id", "h-1"), body: body, want: ferry.ErrBadSignature},
			{name: "TamperedBody", header: signed, body: []byte(`{}`), want: ferry.ErrBadSignature},
			{name: "MissingID", header: with(signed, "X-Event-Id", ""), body: body, want: ferry.ErrNoEventID},
		})
	})

	t.Run("IDFromField", func(t *testing.T) {
		t.Parallel()
		scheme := provider.HMACOptions{Header: "X-Sig", Encoding: provider.EncodingBase64, EventIDField: "event_id", TypeField: "kind"}
		v := newVerifier(t, scheme)
		got, err := v.Verify(sign(t, secret, scheme, body), body)
		if err != nil || got.EventID != "e-1" || got.Type != "order.paid" {
			t.Fatalf("Verify = %+v, %v", got, err)
		}
		signedBody := func(b string) (http.Header, []byte) { return sign(t, secret, scheme, []byte(b)), []byte(b) }
		notJSON, notJSONBody := signedBody(`event_id=e-1`)
		noID, noIDBody := signedBody(`{"kind":"x"}`)
		nullID, nullIDBody := signedBody(`{"event_id":null}`)
		objectID, objectIDBody := signedBody(`{"event_id":{"a":1}}`)
		array, arrayBody := signedBody(`["e-1"]`)
		runCases(t, v, []string{secret, oldSecret}, []verifyCase{
			{name: "NotBase64", header: with(notJSON, "X-Sig", "@@@"), body: notJSONBody, want: ferry.ErrMalformedSignature},
			{name: "HexInsteadOfBase64", header: with(notJSON, "X-Sig", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"), body: notJSONBody, want: ferry.ErrMalformedSignature},
			{name: "BadJSON", header: notJSON, body: notJSONBody, want: ferry.ErrBadPayload},
			{name: "NotAnObject", header: array, body: arrayBody, want: ferry.ErrBadPayload},
			{name: "MissingID", header: noID, body: noIDBody, want: ferry.ErrNoEventID},
			{name: "NullID", header: nullID, body: nullIDBody, want: ferry.ErrNoEventID},
			{name: "ObjectID", header: objectID, body: objectIDBody, want: ferry.ErrBadPayload},
		})
	})

	t.Run("NumericID", func(t *testing.T) {
		t.Parallel()
		scheme := provider.HMACOptions{Header: "X-Sig", EventIDField: "seq"}
		got, err := newVerifier(t, scheme).Verify(sign(t, secret, scheme, body), body)
		if err != nil || got.EventID != "42" || got.Type != "" {
			t.Fatalf("Verify = %+v, %v", got, err)
		}
	})

	t.Run("SHA1", func(t *testing.T) {
		t.Parallel()
		scheme := provider.HMACOptions{Header: "X-Hub-Signature", Prefix: "sha1=", Algorithm: provider.AlgorithmSHA1, EventIDField: "event_id"}
		v := newVerifier(t, scheme)
		if got, err := v.Verify(sign(t, secret, scheme, body), body); err != nil || got.EventID != "e-1" {
			t.Fatalf("Verify = %+v, %v", got, err)
		}
		// A SHA-256 MAC is the wrong length for a SHA-1 scheme.
		sha256Scheme := scheme
		sha256Scheme.Algorithm = provider.AlgorithmSHA256
		if _, err := v.Verify(sign(t, secret, sha256Scheme, body), body); !errors.Is(err, ferry.ErrMalformedSignature) {
			t.Fatalf("SHA-256 MAC on a SHA-1 scheme: %v", err)
		}
	})
}

func TestHMACInvalidOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		scheme provider.HMACOptions
	}{
		{"NoHeader", provider.HMACOptions{EventIDHeader: "X-Id"}},
		{"NoEventID", provider.HMACOptions{Header: "X-Sig"}},
		{"TwoEventIDs", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", EventIDField: "id"}},
		{"TwoTypes", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", TypeHeader: "X-T", TypeField: "t"}},
		{"UnknownEncoding", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", Encoding: "base32"}},
		{"UnknownAlgorithm", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", Algorithm: "md5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := provider.NewHMAC(provider.Options{Secrets: []string{"s"}, HMAC: tc.scheme})
			if !errors.Is(err, provider.ErrInvalidOptions) {
				t.Fatalf("error = %v, want ErrInvalidOptions", err)
			}
		})
	}
}
