package provider_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

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
			{name: "OldSecret", header: with(sign(t, oldSecret, scheme, body), "X-Event-Id", "h-1"), body: body, wantID: "h-1", wantSecret: 1},
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

	// The type is optional: with the id in a header, a body that is not
	// JSON has no type field, and the delivery is still genuine.
	t.Run("TypeFieldNotJSON", func(t *testing.T) {
		t.Parallel()
		scheme := provider.HMACOptions{Header: "X-Signature", EventIDHeader: "X-Event-Id", TypeField: "kind"}
		plain := []byte("a=b")
		got, err := newVerifier(t, scheme).Verify(with(sign(t, secret, scheme, plain), "X-Event-Id", "h-1"), plain)
		if err != nil || got.EventID != "h-1" || got.Type != "" {
			t.Fatalf("Verify = %+v, %v", got, err)
		}
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

// TestHMACIDTimestampBody: in HMACModeIDTimestampBody the id and the
// timestamp are signed, so a captured delivery re-sent under a new id, or
// after the tolerance, is refused.
func TestHMACIDTimestampBody(t *testing.T) {
	t.Parallel()

	const secret, oldSecret = "new-secret", "old-secret"
	scheme := provider.HMACOptions{
		Header: "X-Signature", Prefix: "v1=", Mode: provider.HMACModeIDTimestampBody,
		EventIDHeader: "X-Event-Id", TimestampHeader: "X-Timestamp", TypeHeader: "X-Event-Type",
	}
	body := []byte(`{"amount":42}`)
	v, err := provider.NewHMAC(provider.Options{Secrets: []string{secret, oldSecret}, HMAC: scheme, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(secret, id string, at time.Time) http.Header {
		t.Helper()
		h, err := ferrytest.SignHMACEvent(secret, scheme, id, at, body)
		if err != nil {
			t.Fatal(err)
		}
		h.Set("X-Event-Type", "order.paid")
		return h
	}
	signed := sign(secret, "h-1", now)
	got, err := v.Verify(signed, body)
	if err != nil || got.EventID != "h-1" || got.Type != "order.paid" {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
	bodyOnly, err := ferrytest.SignHMAC(secret, provider.HMACOptions{Header: "X-Signature", Prefix: "v1="}, body)
	if err != nil {
		t.Fatal(err)
	}
	runCases(t, v, []string{secret, oldSecret}, []verifyCase{
		{name: "OldSecret", header: sign(oldSecret, "h-1", now), body: body, wantID: "h-1", wantSecret: 1},
		{name: "WithinTolerance", header: sign(secret, "h-1", now.Add(-299*time.Second)), body: body, wantID: "h-1"},
		{name: "ReplayedUnderNewID", header: with(signed, "X-Event-Id", "h-2"), body: body, want: ferry.ErrBadSignature},
		{name: "TimestampChanged", header: with(signed, "X-Timestamp", "1700000001"), body: body, want: ferry.ErrBadSignature},
		{name: "TamperedBody", header: signed, body: []byte(`{"amount":43}`), want: ferry.ErrBadSignature},
		{name: "BodyOnlySignature", header: with(signed, "X-Signature", bodyOnly.Get("X-Signature")), body: body, want: ferry.ErrBadSignature},
		{name: "WrongSecret", header: sign("guess", "h-1", now), body: body, want: ferry.ErrBadSignature},
		{name: "Stale", header: sign(secret, "h-1", now.Add(-301*time.Second)), body: body, want: ferry.ErrStaleTimestamp},
		{name: "Future", header: sign(secret, "h-1", now.Add(301*time.Second)), body: body, want: ferry.ErrStaleTimestamp},
		{name: "MissingTimestamp", header: with(signed, "X-Timestamp", ""), body: body, want: ferry.ErrMalformedSignature},
		{name: "TimestampNotUnix", header: with(signed, "X-Timestamp", "2023-11-14T22:13:20Z"), body: body, want: ferry.ErrMalformedSignature},
		{name: "MissingSignature", header: with(signed, "X-Signature", ""), body: body, want: ferry.ErrNoSignature},
		{name: "MissingID", header: with(sign(secret, "", now), "X-Event-Id", ""), body: body, want: ferry.ErrNoEventID},
	})

	t.Run("Tolerance", func(t *testing.T) {
		t.Parallel()
		v, err := provider.NewHMAC(provider.Options{Secrets: []string{secret}, HMAC: scheme, Now: clock, Tolerance: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(sign(secret, "h-1", now.Add(-9*time.Minute)), body); err != nil {
			t.Fatalf("9 minutes old with a 10 minute tolerance: %v", err)
		}
		if _, err := v.Verify(sign(secret, "h-1", now.Add(-11*time.Minute)), body); !errors.Is(err, ferry.ErrStaleTimestamp) {
			t.Fatalf("11 minutes old with a 10 minute tolerance: %v, want ErrStaleTimestamp", err)
		}
	})

	// The gap the mode closes: signing the body alone, the same capture
	// verifies under any id.
	t.Run("BodyModeDoesNotCoverTheID", func(t *testing.T) {
		t.Parallel()
		body := provider.HMACOptions{Header: "X-Signature", Prefix: "v1=", EventIDHeader: "X-Event-Id"}
		v, err := provider.NewHMAC(provider.Options{Secrets: []string{secret}, HMAC: body})
		if err != nil {
			t.Fatal(err)
		}
		h, err := ferrytest.SignHMACEvent(secret, body, "h-1", now, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := v.Verify(with(h, "X-Event-Id", "h-2"), []byte(`{}`)); err != nil || got.EventID != "h-2" {
			t.Fatalf("Verify = %+v, %v: body mode was expected to accept a new id", got, err)
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
		{"HeaderNotAToken", provider.HMACOptions{Header: "X Sig", EventIDHeader: "X-Id"}},
		{"EventIDHeaderNotAToken", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X:Id"}},
		{"TypeHeaderNotAToken", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", TypeHeader: "X\nT"}},
		{"TimestampHeaderNotAToken", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", TimestampHeader: "X Ts", Mode: provider.HMACModeIDTimestampBody}},
		{"UnknownEncoding", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", Encoding: "base32"}},
		{"UnknownAlgorithm", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", Algorithm: "md5"}},
		{"UnknownMode", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", Mode: "timestamp.body"}},
		{"TimestampHeaderInBodyMode", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", TimestampHeader: "X-Ts"}},
		{"IDTimestampWithoutTimestampHeader", provider.HMACOptions{Header: "X-Sig", EventIDHeader: "X-Id", Mode: provider.HMACModeIDTimestampBody}},
		{"IDTimestampWithIDField", provider.HMACOptions{Header: "X-Sig", EventIDField: "id", TimestampHeader: "X-Ts", Mode: provider.HMACModeIDTimestampBody}},
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
