package provider_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/provider"
)

// now is the clock every test verifier runs on.
var now = time.Unix(1_700_000_000, 0)

func clock() time.Time { return now }

// verifyCase is one delivery and the error its verifier must return; want
// nil means it must verify as wantID, and as wantType when that is set.
type verifyCase struct {
	name     string
	header   http.Header
	body     []byte
	want     error
	wantID   string
	wantType string
	// wantSecret is the position of the secret that verifies it.
	wantSecret int
}

// runCases verifies each case and checks that no error mentions a secret.
func runCases(t *testing.T, v ferry.Verifier, secrets []string, cases []verifyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := v.Verify(tc.header, tc.body)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if got.EventID != tc.wantID {
					t.Fatalf("EventID = %q, want %q", got.EventID, tc.wantID)
				}
				if tc.wantType != "" && got.Type != tc.wantType {
					t.Fatalf("Type = %q, want %q", got.Type, tc.wantType)
				}
				if got.Secret != tc.wantSecret {
					t.Fatalf("Secret = %d, want %d", got.Secret, tc.wantSecret)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify error = %v, want %v", err, tc.want)
			}
			if got != nil {
				t.Fatalf("Verify returned %+v with an error", got)
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("error %q reveals a secret", err)
				}
			}
		})
	}
}

// with returns a copy of h with name set to value ("" deletes it).
func with(h http.Header, name, value string) http.Header {
	h = h.Clone()
	if value == "" {
		h.Del(name)
	} else {
		h.Set(name, value)
	}
	return h
}

// sentinels are the errors a verifier may return.
var sentinels = []error{
	ferry.ErrNoSignature, ferry.ErrMalformedSignature, ferry.ErrBadSignature,
	ferry.ErrStaleTimestamp, ferry.ErrNoEventID, ferry.ErrBadPayload,
	ferry.ErrBadEventID, ferry.ErrBadEventType,
}

// checkOutcome fails unless a verification either succeeded with an event id
// or failed with one of the sentinels.
func checkOutcome(t *testing.T, got *ferry.Verified, err error) {
	t.Helper()
	if err == nil {
		if got == nil || got.EventID == "" {
			t.Fatalf("verified without an event id: %+v", got)
		}
		return
	}
	if _, ok := errors.AsType[*ferry.VerifyError](err); !ok {
		t.Fatalf("error %v is not a *ferry.VerifyError: the receiver would answer no detail", err)
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error %v wraps no ferry sentinel", err)
}

func TestNew(t *testing.T) {
	t.Parallel()

	hmacOpts := provider.HMACOptions{Header: "X-Signature", EventIDHeader: "X-Event-Id"}
	for _, name := range provider.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			secret := "c2VjcmV0LWtleQ==" // base64, so standardwebhooks accepts it too
			v, err := provider.New(name, provider.Options{Secrets: []string{secret}, HMAC: hmacOpts})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if v == nil {
				t.Fatal("New returned nil")
			}
			v, err = provider.New(name, provider.Options{HMAC: hmacOpts})
			if !errors.Is(err, provider.ErrInvalidOptions) {
				t.Fatalf("New without secrets: %v, want ErrInvalidOptions", err)
			}
			// A nil pointer inside the interface would pass a nil check
			// and panic on the first delivery.
			if v != nil {
				t.Fatalf("New returned %#v with its error, want a nil interface", v)
			}
		})
	}

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		v, err := provider.New("paypal", provider.Options{Secrets: []string{"s"}})
		if !errors.Is(err, provider.ErrUnknownProvider) || v != nil {
			t.Fatalf("New = %#v, %v, want a nil interface and ErrUnknownProvider", v, err)
		}
		for _, name := range provider.Names() {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("error %q does not list %q", err, name)
			}
		}
	})

	t.Run("InvalidOptions", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			opts provider.Options
		}{
			{"EmptySecret", provider.Options{Secrets: []string{"ok", ""}}},
			{"NegativeTolerance", provider.Options{Secrets: []string{"s"}, Tolerance: -time.Second}},
		} {
			if _, err := provider.NewStripe(tc.opts); !errors.Is(err, provider.ErrInvalidOptions) {
				t.Errorf("%s: error = %v, want ErrInvalidOptions", tc.name, err)
			}
		}
	})

	// A secret the provider cannot use is named by its index, so a config
	// can point at the entry; the secret itself is never in the message.
	t.Run("SecretError", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name    string
			secrets []string
			index   int
		}{
			{"stripe", []string{"ok", ""}, 1},
			{"standardwebhooks", []string{"whsec_SEKRET!"}, 0},
		} {
			_, err := provider.New(tc.name, provider.Options{Secrets: tc.secrets})
			var bad *provider.SecretError
			if !errors.As(err, &bad) || bad.Index != tc.index || !errors.Is(err, provider.ErrInvalidOptions) {
				t.Errorf("%s %q: error = %v, want a SecretError at %d that is an ErrInvalidOptions", tc.name, tc.secrets, err, tc.index)
			}
			if err != nil && strings.Contains(err.Error(), "SEKRET") {
				t.Errorf("%s: error %q holds the secret", tc.name, err)
			}
		}
	})
}
