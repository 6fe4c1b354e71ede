package provider_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

// The verify fuzzers check two things for any input: the verifier returns
// an event id or a ferry sentinel (and never panics), and a body the signer
// signed verifies unless its identity is missing, unparseable, or text it
// cannot store as sent.

const fuzzSecret = "whsec_ZnV6ei1zZWNyZXQ="

var fuzzBodies = []string{`{"id":"evt_1","type":"t"}`, `{}`, `not json`, `{"id":7}`, ``, `{"id":"\u0000"}`, "{\"id\":\"e\xff\",\"type\":\"t\xfe\"}", `{"id":"\ud800","type":"\udc00"}`}

// signedOK fails unless a genuinely signed delivery verified or failed only
// for its identity: missing, unparseable, or (bad_event_id, bad_event_type)
// text the body cannot carry exactly as sent.
func signedOK(t *testing.T, body []byte, err error) {
	t.Helper()
	switch {
	case err == nil, errors.Is(err, ferry.ErrNoEventID), errors.Is(err, ferry.ErrBadPayload):
	case errors.Is(err, ferry.ErrBadEventID), errors.Is(err, ferry.ErrBadEventType):
		if utf8.Valid(body) && !bytes.Contains(bytes.ToLower(body), []byte(`\ud`)) {
			t.Fatalf("signed delivery with UTF-8 text and no surrogate escape refused: %v", err)
		}
	default:
		t.Fatalf("signed delivery refused: %v", err)
	}
}

func FuzzStripeHeader(f *testing.F) {
	for _, seed := range []string{
		"t=1700000000,v1=" + hex64, "t=1,v1=" + hex64 + ",v0=x,v1=" + hex64, "t=,v1=", "t=1,t=2,v1=" + hex64,
		",,t=1 , v1=" + hex64, "v1", "=", "t=-9223372036854775808,v1=" + hex64, "t=99999999999999999999",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		_, err := provider.ParseStripeHeader(value)
		if err != nil && !errors.Is(err, ferry.ErrMalformedSignature) {
			t.Fatalf("parse error %v is not ErrMalformedSignature", err)
		}
	})
}

func FuzzStripeVerify(f *testing.F) {
	for _, b := range fuzzBodies {
		f.Add(ferrytest.SignStripe(fuzzSecret, []byte(b), now).Get("Stripe-Signature"), []byte(b), int64(0))
	}
	f.Add("t=1700000000,v1="+hex64, []byte(`{"id":"x"}`), int64(-1e12))
	v, err := provider.NewStripe(provider.Options{Secrets: []string{fuzzSecret}, Now: clock})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sig string, body []byte, skew int64) {
		got, err := v.Verify(http.Header{"Stripe-Signature": {sig}}, body)
		checkOutcome(t, got, err)
		at := now.Add(time.Duration(skew%300) * time.Second)
		_, err = v.Verify(ferrytest.SignStripe(fuzzSecret, body, at), body)
		signedOK(t, body, err)
	})
}

func FuzzGitHubVerify(f *testing.F) {
	fuzzBodyHMAC(f, provider.NewGitHub, provider.GitHubSignatureHeader, provider.GitHubDeliveryHeader, "sha256=", func(id string, body []byte) http.Header {
		return ferrytest.SignGitHub(fuzzSecret, id, "push", body)
	})
}

func FuzzShopifyVerify(f *testing.F) {
	fuzzBodyHMAC(f, provider.NewShopify, provider.ShopifySignatureHeader, provider.ShopifyWebhookIDHeader, "====", func(id string, body []byte) http.Header {
		return ferrytest.SignShopify(fuzzSecret, id, "orders/create", body)
	})
}

// fuzzBodyHMAC fuzzes the verifier newVerifier makes, one of a body HMAC
// in sigHeader with the event id in idHeader: any signature, id and body
// give an id or a sentinel, and sign's deliveries verify. badSig is one
// more seed signature.
func fuzzBodyHMAC[V ferry.Verifier](f *testing.F, newVerifier func(provider.Options) (V, error), sigHeader, idHeader, badSig string, sign func(id string, body []byte) http.Header) {
	v, err := newVerifier(provider.Options{Secrets: []string{fuzzSecret}})
	if err != nil {
		f.Fatal(err)
	}
	for _, b := range fuzzBodies {
		f.Add(sign("d-1", []byte(b)).Get(sigHeader), "d-1", []byte(b))
	}
	f.Add(badSig, "", []byte(nil))
	f.Fuzz(func(t *testing.T, sig, id string, body []byte) {
		got, err := v.Verify(http.Header{http.CanonicalHeaderKey(sigHeader): {sig}, http.CanonicalHeaderKey(idHeader): {id}}, body)
		checkOutcome(t, got, err)
		_, err = v.Verify(sign(id, body), body)
		signedOK(t, body, err)
	})
}

func FuzzSignatureValue(f *testing.F) {
	for _, seed := range []string{"sha256=" + hex64, hex64, "sha256=", "AAAA", "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "=="} {
		f.Add(seed, "sha256=", false)
		f.Add(seed, "", true)
	}
	f.Fuzz(func(t *testing.T, value, prefix string, base64 bool) {
		enc := provider.EncodingHex
		if base64 {
			enc = provider.EncodingBase64
		}
		mac, err := provider.DecodeSignature(value, prefix, enc, 32)
		if err == nil && len(mac) != 32 {
			t.Fatalf("decoded %d bytes, want 32", len(mac))
		}
	})
}

func FuzzStandardWebhooksHeader(f *testing.F) {
	for _, seed := range []string{swVectorSignature, "v1,a v1,b", "v1a,x " + swVectorSignature, "", " ", "v1,", ",", "v1,===="} {
		f.Add(seed)
	}
	valid, err := base64.StdEncoding.DecodeString(swVectorSignature[len("v1,"):])
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value string) {
		sigs, err := provider.ParseStandardWebhooksSignatures(value)
		if err != nil && !errors.Is(err, ferry.ErrMalformedSignature) {
			t.Fatalf("parse error %v is not ErrMalformedSignature", err)
		}
		if err == nil && len(sigs) == 0 {
			t.Fatal("no error and no signature")
		}
		for _, sig := range sigs {
			if len(sig) != 32 {
				t.Fatalf("parsed a %d-byte signature, want 32", len(sig))
			}
		}
		// Whatever else the list holds, a readable v1 entry beside it is
		// found: nothing before or after it can hide it.
		for _, list := range []string{value + " " + swVectorSignature, swVectorSignature + " " + value} {
			sigs, err := provider.ParseStandardWebhooksSignatures(list)
			if err != nil || !slices.ContainsFunc(sigs, func(s []byte) bool { return bytes.Equal(s, valid) }) {
				t.Fatalf("%q: valid entry lost: %d signatures, %v", list, len(sigs), err)
			}
		}
	})
}

func FuzzStandardWebhooksVerify(f *testing.F) {
	for _, b := range fuzzBodies {
		h, err := ferrytest.SignStandardWebhooks(fuzzSecret, "msg_1", now, []byte(b))
		if err != nil {
			f.Fatal(err)
		}
		f.Add("msg_1", h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature"), []byte(b))
	}
	f.Add("", "-1", "v1,AAAA v2,x", []byte(nil))
	v, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{fuzzSecret}, Now: clock})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id, timestamp, sig string, body []byte) {
		h := http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {timestamp}, "Webhook-Signature": {sig}}
		got, err := v.Verify(h, body)
		checkOutcome(t, got, err)
		signed, err := ferrytest.SignStandardWebhooks(fuzzSecret, id, now, body)
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(signed, body)
		signedOK(t, body, err)
	})
}

func FuzzHMACVerify(f *testing.F) {
	scheme := provider.HMACOptions{Header: "X-Sig", Prefix: "v=", Encoding: provider.EncodingBase64, EventIDField: "id", TypeField: "type"}
	for _, b := range fuzzBodies {
		h, err := ferrytest.SignHMAC(fuzzSecret, scheme, []byte(b))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(h.Get("X-Sig"), []byte(b))
	}
	f.Add("v=", []byte(`{"id":1e999}`))
	v, err := provider.NewHMAC(provider.Options{Secrets: []string{fuzzSecret}, HMAC: scheme})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		got, err := v.Verify(http.Header{"X-Sig": {sig}}, body)
		checkOutcome(t, got, err)
		signed, err := ferrytest.SignHMAC(fuzzSecret, scheme, body)
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(signed, body)
		signedOK(t, body, err)
	})
}

func FuzzHMACIDTimestampVerify(f *testing.F) {
	scheme := provider.HMACOptions{
		Header: "X-Sig", Mode: provider.HMACModeIDTimestampBody,
		EventIDHeader: "X-Id", TimestampHeader: "X-Ts", TypeField: "type",
	}
	for _, b := range fuzzBodies {
		h, err := ferrytest.SignHMACEvent(fuzzSecret, scheme, "e-1", now, []byte(b))
		if err != nil {
			f.Fatal(err)
		}
		f.Add("e-1", h.Get("X-Ts"), h.Get("X-Sig"), []byte(b))
	}
	f.Add("", "-9223372036854775808", hex64, []byte(nil))
	v, err := provider.NewHMAC(provider.Options{Secrets: []string{fuzzSecret}, HMAC: scheme, Now: clock})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id, timestamp, sig string, body []byte) {
		got, err := v.Verify(http.Header{"X-Id": {id}, "X-Ts": {timestamp}, "X-Sig": {sig}}, body)
		checkOutcome(t, got, err)
		signed, err := ferrytest.SignHMACEvent(fuzzSecret, scheme, id, now, body)
		if err != nil {
			t.Fatal(err)
		}
		got, err = v.Verify(signed, body)
		signedOK(t, body, err)
		if err == nil && got.EventID != id {
			t.Fatalf("EventID = %q, want %q", got.EventID, id)
		}
	})
}

// hex64 is a well-formed (and wrong) hex SHA-256.
const hex64 = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
