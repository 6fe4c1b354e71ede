package provider_test

import (
	"errors"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

// An id or type read from a JSON body is kept as the sender wrote it, or
// refused: Go's decoder would turn invalid UTF-8 and unpaired surrogate
// escapes into U+FFFD, and two events signed apart would be stored as one.
func TestBodyIdentityIsKeptAsSent(t *testing.T) {
	t.Parallel()
	const secret = "whsec_bmV3LXNlY3JldC1rZXk="
	stripe, err := provider.NewStripe(provider.Options{Secrets: []string{secret}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	hmacScheme := provider.HMACOptions{Header: "X-Sig", EventIDField: "id", TypeField: "type"}
	hmac, err := provider.NewHMAC(provider.Options{Secrets: []string{secret}, HMAC: hmacScheme})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{secret}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	verifiers := map[string]func(body []byte) (*ferry.Verified, error){
		"stripe": func(body []byte) (*ferry.Verified, error) {
			return stripe.Verify(ferrytest.SignStripe(secret, body, now), body)
		},
		"hmac": func(body []byte) (*ferry.Verified, error) {
			h, err := ferrytest.SignHMAC(secret, hmacScheme, body)
			if err != nil {
				t.Fatal(err)
			}
			return hmac.Verify(h, body)
		},
		"standardwebhooks": func(body []byte) (*ferry.Verified, error) {
			h, err := ferrytest.SignStandardWebhooks(secret, "msg_1", now, body)
			if err != nil {
				t.Fatal(err)
			}
			return sw.Verify(h, body)
		},
	}
	for _, tc := range []struct {
		name, body string
		want       error  // for the id; standardwebhooks takes its id from a header
		wantType   error  // for the type
		id         string // when accepted
	}{
		{"InvalidByte", "{\"id\":\"evt_\xff\",\"type\":\"t\"}", ferry.ErrBadEventID, nil, ""},
		{"LoneHighSurrogate", `{"id":"evt_\ud800","type":"t"}`, ferry.ErrBadEventID, nil, ""},
		{"LoneLowSurrogate", `{"id":"evt_\udc00x","type":"t"}`, ferry.ErrBadEventID, nil, ""},
		{"HighThenNotLow", `{"id":"evt_\ud83d\u0041","type":"t"}`, ferry.ErrBadEventID, nil, ""},
		{"TypeInvalidByte", "{\"id\":\"evt_1\",\"type\":\"t\xfe\"}", nil, ferry.ErrBadEventType, "evt_1"},
		{"SurrogatePair", `{"id":"evt_\ud83d\ude00","type":"t"}`, nil, nil, "evt_\U0001F600"},
		{"ReplacementCharEscaped", `{"id":"evt_\uFFFD","type":"t"}`, nil, nil, "evt_\uFFFD"},
		{"ReplacementCharLiteral", "{\"id\":\"evt_\uFFFD\\\\ud800\",\"type\":\"t\"}", nil, nil, "evt_\uFFFD\\ud800"},
	} {
		for name, verify := range verifiers {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				t.Parallel()
				want := tc.want
				if name == "standardwebhooks" {
					want = nil
				}
				if want == nil {
					want = tc.wantType
				}
				v, err := verify([]byte(tc.body))
				if want != nil {
					var ve *ferry.VerifyError
					if !errors.Is(err, want) || !errors.As(err, &ve) || ve.Detail == "" || v != nil {
						t.Fatalf("Verify = %+v, %v; want %v with a detail", v, err, want)
					}
					return
				}
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if name != "standardwebhooks" && v.EventID != tc.id {
					t.Errorf("id = %q, want %q", v.EventID, tc.id)
				}
			})
		}
	}
}
