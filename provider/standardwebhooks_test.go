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

// The example of the Standard Webhooks reference libraries' tests
// (standard-webhooks/standard-webhooks, libraries/go/webhook_test.go,
// TestWebhookSign).
const (
	swVectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swVectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swVectorTimestamp = 1614265330
	swVectorPayload   = `{"test": 2432232314}`
	swVectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// wrongSig is a well-formed v1 signature (base64 of 32 bytes) that no test
// secret produces.
const wrongSig = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

// vectorVerifier is a Standard Webhooks verifier for secret whose clock
// reads now.
func vectorVerifier(t *testing.T, secret string, now time.Time) *provider.StandardWebhooks {
	t.Helper()
	v, err := provider.NewStandardWebhooks(provider.Options{
		Secrets: []string{secret},
		Now:     func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// vectorHeader carries the published vector's id and timestamp and sig,
// under the header names prefix-id, prefix-timestamp, prefix-signature
// (prefix "webhook" or "svix").
func vectorHeader(prefix, sig string) http.Header {
	h := http.Header{}
	h.Set(prefix+"-id", swVectorID)
	h.Set(prefix+"-timestamp", "1614265330")
	h.Set(prefix+"-signature", sig)
	return h
}

func TestStandardWebhooksPublishedVector(t *testing.T) {
	t.Parallel()

	signedAt := time.Unix(swVectorTimestamp, 0)
	h, err := ferrytest.SignStandardWebhooks(swVectorSecret, swVectorID, signedAt, []byte(swVectorPayload))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get("Webhook-Signature"); got != swVectorSignature {
		t.Fatalf("signer: %s, want %s", got, swVectorSignature)
	}

	// Both secret spellings, prefixed and bare.
	for _, secret := range []string{swVectorSecret, swVectorSecret[len("whsec_"):]} {
		v := vectorVerifier(t, secret, signedAt.Add(time.Minute))
		got, err := v.Verify(vectorHeader("webhook", swVectorSignature), []byte(swVectorPayload))
		if err != nil || got.EventID != swVectorID || got.Type != "" {
			t.Fatalf("Verify with %q = %+v, %v", secret, got, err)
		}
	}
}

func TestStandardWebhooks(t *testing.T) {
	t.Parallel()

	const secret, oldSecret = "whsec_bmV3LXNlY3JldC1rZXk=", "whsec_b2xkLXNlY3JldC1rZXk="
	body := []byte(`{"type":"user.created","data":{}}`)
	v, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{secret, oldSecret}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(secret, id string, at time.Time, body []byte) http.Header {
		h, err := ferrytest.SignStandardWebhooks(secret, id, at, body)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	signed := sign(secret, "msg_1", now, body)
	sig := signed.Get("Webhook-Signature")
	oldSig := sign(oldSecret, "msg_1", now, body).Get("Webhook-Signature")
	h := func(value string) http.Header { return with(signed, "Webhook-Signature", value) }

	runCases(t, v, []string{secret, oldSecret, secret[len("whsec_"):]}, []verifyCase{
		{name: "Valid", header: signed, body: body, wantID: "msg_1", wantType: "user.created"},
		{name: "OldSecret", header: h(oldSig), body: body, wantID: "msg_1", wantSecret: 1},
		{name: "SeveralSignatures", header: h("v1a,ignored v2,AAAA " + oldSig + " " + sig), body: body, wantID: "msg_1"},
		// The reference libraries skip entries they cannot read and accept
		// when any v1 entry matches, wherever it stands in the list.
		{name: "ForgedBesideValid", header: h("v1,Zm9yZ2Vk " + sig), body: body, wantID: "msg_1"},
		{name: "WrongBeforeValid", header: h("v1," + wrongSig + " " + sig), body: body, wantID: "msg_1"},
		{name: "ValidBeforeUnreadable", header: h(sig + " v1,!!! nocomma v1, ,"), body: body, wantID: "msg_1"},
		{name: "UnreadableBesideValid", header: h("v1,!!!  v1,  nocomma v1,Zm9yZ2Vk\t" + sig), body: body, wantID: "msg_1"},
		{name: "OnlyUnreadable", header: h("v1,Zm9yZ2Vk v1,!!! nocomma v2," + sig[3:]), body: body, want: ferry.ErrMalformedSignature},
		{name: "OnlyWrong", header: h("v1,Zm9yZ2Vk v1," + wrongSig), body: body, want: ferry.ErrBadSignature},
		{name: "NotJSON", header: sign(secret, "msg_2", now, []byte("plain")), body: []byte("plain"), wantID: "msg_2"},
		{name: "MissingHeader", header: h(""), body: body, want: ferry.ErrNoSignature},
		{name: "NoVersion", header: h("g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="), body: body, want: ferry.ErrMalformedSignature},
		{name: "NoV1", header: h("v2,AAAA"), body: body, want: ferry.ErrMalformedSignature},
		{name: "V1NotBase64", header: h("v1,!!!"), body: body, want: ferry.ErrMalformedSignature},
		{name: "MissingTimestamp", header: with(signed, "Webhook-Timestamp", ""), body: body, want: ferry.ErrMalformedSignature},
		{name: "BadTimestamp", header: with(signed, "Webhook-Timestamp", "1.7e9"), body: body, want: ferry.ErrMalformedSignature},
		{name: "WrongSecret", header: sign("whsec_Z3Vlc3M=", "msg_1", now, body), body: body, want: ferry.ErrBadSignature},
		{name: "TamperedBody", header: signed, body: []byte(`{}`), want: ferry.ErrBadSignature},
		{name: "TamperedID", header: with(signed, "Webhook-Id", "msg_2"), body: body, want: ferry.ErrBadSignature},
		{name: "Stale", header: sign(secret, "msg_1", now.Add(-301*time.Second), body), body: body, want: ferry.ErrStaleTimestamp},
		{name: "Future", header: sign(secret, "msg_1", now.Add(301*time.Second), body), body: body, want: ferry.ErrStaleTimestamp},
		{name: "MissingID", header: with(sign(secret, "", now, body), "Webhook-Id", ""), body: body, want: ferry.ErrNoEventID},
	})
}

// A Tolerance given is the one applied, in both directions.
func TestStandardWebhooksTolerance(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"type":"t"}`)
	v, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{secret}, Tolerance: time.Hour, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Time
		want error
	}{{now.Add(-59 * time.Minute), nil}, {now.Add(59 * time.Minute), nil}, {now.Add(-61 * time.Minute), ferry.ErrStaleTimestamp}, {now.Add(61 * time.Minute), ferry.ErrStaleTimestamp}} {
		h, err := ferrytest.SignStandardWebhooks(secret, "msg_1", tc.at, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(h, body); !errors.Is(err, tc.want) {
			t.Errorf("signed %v from now under a 1h tolerance: %v, want %v", tc.at.Sub(now), err, tc.want)
		}
	}
}

// TestStandardWebhooksForgedEntryBesidePublishedVector is issue 10's case:
// a signature list holding a forged entry and the reference signer's valid
// one verifies; the forged entry alone does not.
func TestStandardWebhooksForgedEntryBesidePublishedVector(t *testing.T) {
	t.Parallel()

	v := vectorVerifier(t, swVectorSecret, time.Unix(swVectorTimestamp, 0))
	got, err := v.Verify(vectorHeader("webhook", "v1,Zm9yZ2Vk "+swVectorSignature), []byte(swVectorPayload))
	if err != nil || got.EventID != swVectorID {
		t.Fatalf("forged entry beside the valid one: Verify = %+v, %v", got, err)
	}
	if _, err := v.Verify(vectorHeader("webhook", "v1,Zm9yZ2Vk"), []byte(swVectorPayload)); !errors.Is(err, ferry.ErrMalformedSignature) {
		t.Fatalf("forged entry alone: Verify error = %v, want ErrMalformedSignature", err)
	}
}

func TestStandardWebhooksSvixHeaders(t *testing.T) {
	t.Parallel()

	v := vectorVerifier(t, swVectorSecret, time.Unix(swVectorTimestamp, 0))
	got, err := v.Verify(vectorHeader("svix", swVectorSignature), []byte(swVectorPayload))
	if err != nil || got.EventID != swVectorID {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
}

func TestStandardWebhooksBadSecret(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"whsec_!!!", "whsec_"} {
		_, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{secret}})
		if !errors.Is(err, provider.ErrInvalidOptions) {
			t.Errorf("secret %q: error = %v, want ErrInvalidOptions", secret, err)
		}
	}
	if _, err := ferrytest.SignStandardWebhooks("whsec_!!!", "msg_1", now, nil); err == nil {
		t.Error("SignStandardWebhooks accepted a secret that is not base64")
	}
}

// A secret whose base64 lost its padding (copied without the trailing "=")
// is the same key.
func TestStandardWebhooksUnpaddedSecret(t *testing.T) {
	t.Parallel()

	const padded = "whsec_bmV3LXNlY3JldC1rZXk="
	body := []byte(`{"type":"t"}`)
	h, err := ferrytest.SignStandardWebhooks(padded, "msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	v := vectorVerifier(t, padded[:len(padded)-1], now)
	if got, err := v.Verify(h, body); err != nil || got.EventID != "msg_1" {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
}
