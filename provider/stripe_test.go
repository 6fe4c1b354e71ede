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

func TestStripe(t *testing.T) {
	t.Parallel()

	const secret, oldSecret = "whsec_new", "whsec_old"
	body := []byte(`{"id":"evt_1","type":"invoice.paid","data":{}}`)
	v, err := provider.NewStripe(provider.Options{Secrets: []string{secret, oldSecret}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	signed := ferrytest.SignStripe(secret, body, now)
	sig := signed.Get("Stripe-Signature")
	oldSig := ferrytest.SignStripe(oldSecret, body, now).Get("Stripe-Signature")
	h := func(value string) http.Header { return with(signed, "Stripe-Signature", value) }

	runCases(t, v, []string{secret, oldSecret}, []verifyCase{
		{name: "Valid", header: signed, body: body, wantID: "evt_1", wantType: "invoice.paid"},
		{name: "OldSecret", header: h(oldSig), body: body, wantID: "evt_1", wantSecret: 1},
		{name: "SecondV1Matches", header: h(oldSig + ",v1=" + sig[len("t=1700000000,v1="):]), body: body, wantID: "evt_1"},
		// During a rotation Stripe signs with each secret; the one held
		// may be any of them, after a readable one that does not match.
		{name: "WrongV1BeforeValid", header: h("t=1700000000,v1=" + hex64 + ",v1=" + sig[len("t=1700000000,v1="):]), body: body, wantID: "evt_1"},
		{name: "V0Ignored", header: h(sig + ",v0=nothex"), body: body, wantID: "evt_1"},
		{name: "UnreadableV1BeforeValid", header: h("t=1700000000,v1=zz," + sig[len("t=1700000000,"):]), body: body, wantID: "evt_1"},
		{name: "UnreadableV1AfterValid", header: h(sig + ",v1=" + hex64[:62]), body: body, wantID: "evt_1"},
		// ...or before one that does not: every v1 is kept, not the last.
		{name: "ValidV1BeforeWrong", header: h(sig + ",v1=" + hex64), body: body, wantID: "evt_1"},
		{name: "SpacesAroundItems", header: h(" t=1700000000 , v1=" + sig[len("t=1700000000,v1="):]), body: body, wantID: "evt_1"},
		{name: "EmptyItems", header: h("," + sig + ",,"), body: body, wantID: "evt_1"},
		{name: "AtTolerance", header: ferrytest.SignStripe(secret, body, now.Add(-5*time.Minute)), body: body, wantID: "evt_1"},
		{name: "AtToleranceAhead", header: ferrytest.SignStripe(secret, body, now.Add(5*time.Minute)), body: body, wantID: "evt_1"},
		{name: "MissingHeader", header: http.Header{}, body: body, want: ferry.ErrNoSignature},
		{name: "Garbage", header: h("garbage"), body: body, want: ferry.ErrMalformedSignature},
		{name: "NoTimestamp", header: h("v1=" + sig[len("t=1700000000,v1="):]), body: body, want: ferry.ErrMalformedSignature},
		{name: "TwoTimestamps", header: h("t=1700000000," + sig), body: body, want: ferry.ErrMalformedSignature},
		{name: "BadTimestamp", header: h("t=soon,v1=" + sig[len("t=1700000000,v1="):]), body: body, want: ferry.ErrMalformedSignature},
		{name: "NoV1", header: h("t=1700000000,v0=abcd"), body: body, want: ferry.ErrMalformedSignature},
		{name: "V1NotHex", header: h("t=1700000000,v1=zz"), body: body, want: ferry.ErrMalformedSignature},
		{name: "EveryV1Unreadable", header: h("t=1700000000,v1=zz,v1=" + hex64[:62]), body: body, want: ferry.ErrMalformedSignature},
		{name: "UnreadableV1BesideWrongV1", header: h("t=1700000000,v1=zz,v1=" + hex64), body: body, want: ferry.ErrBadSignature},
		{name: "WrongSecret", header: ferrytest.SignStripe("whsec_other", body, now), body: body, want: ferry.ErrBadSignature},
		{name: "TamperedBody", header: signed, body: []byte(`{"id":"evt_2"}`), want: ferry.ErrBadSignature},
		{name: "TamperedTimestamp", header: h("t=1700000001" + sig[len("t=1700000000"):]), body: body, want: ferry.ErrBadSignature},
		{name: "Stale", header: ferrytest.SignStripe(secret, body, now.Add(-301*time.Second)), body: body, want: ferry.ErrStaleTimestamp},
		{name: "Future", header: ferrytest.SignStripe(secret, body, now.Add(301*time.Second)), body: body, want: ferry.ErrStaleTimestamp},
		{name: "MissingID", header: ferrytest.SignStripe(secret, []byte(`{"type":"x"}`), now), body: []byte(`{"type":"x"}`), want: ferry.ErrNoEventID},
		{name: "BadJSON", header: ferrytest.SignStripe(secret, []byte(`{"id":`), now), body: []byte(`{"id":`), want: ferry.ErrBadPayload},
		{name: "NumericID", header: ferrytest.SignStripe(secret, []byte(`{"id":1}`), now), body: []byte(`{"id":1}`), want: ferry.ErrBadPayload},
	})
}

func TestStripeTolerance(t *testing.T) {
	t.Parallel()

	body := []byte(`{"id":"evt_1"}`)
	v, err := provider.NewStripe(provider.Options{Secrets: []string{"s"}, Tolerance: time.Hour, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ferrytest.SignStripe("s", body, now.Add(-59*time.Minute)), body); err != nil {
		t.Fatalf("within a 1h tolerance: %v", err)
	}
	if _, err := v.Verify(ferrytest.SignStripe("s", body, now.Add(61*time.Minute)), body); !errors.Is(err, ferry.ErrStaleTimestamp) {
		t.Fatalf("beyond a 1h tolerance: %v", err)
	}
}

// An unreadable v1 is skipped, but a header with no readable v1 is refused
// for the reason it was refused for before skipping: an unreadable v1 when
// there was one, no v1 when there was none.
func TestStripeNoReadableV1Reason(t *testing.T) {
	t.Parallel()

	body := []byte(`{"id":"evt_1"}`)
	v, err := provider.NewStripe(provider.Options{Secrets: []string{"s"}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, header, want string }{
		{"OneUnreadable", "t=1700000000,v1=zz", "v1 is not a hex SHA-256"},
		{"EveryUnreadable", "t=1700000000,v1=zz,v1=" + hex64[:62], "v1 is not a hex SHA-256"},
		{"UnreadableNoTimestamp", "v1=zz", "v1 is not a hex SHA-256"},
		{"NoV1", "t=1700000000,v0=abcd", "no v1 signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := v.Verify(http.Header{"Stripe-Signature": {tc.header}}, body)
			want := "stripe: " + ferry.ErrMalformedSignature.Error() + ": " + tc.want
			if err == nil || err.Error() != want {
				t.Fatalf("Verify error = %v, want %q", err, want)
			}
		})
	}
}
