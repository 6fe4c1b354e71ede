package provider_test

import (
	"encoding/base64"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

// Recognisable secret, event id, body and header value: none may appear in
// an error the receiver shows a sender and logs.
const (
	markSecret = "SECRETMARK-5e1d"
	markID     = "IDMARK-42"
	markBody   = "BODYMARK-93"
	markValue  = "VALUEMARK-07"
)

// detailVerifier is one verifier with a genuine delivery it signs.
type detailVerifier struct {
	name    string
	secrets []string // as configured, and any key derived from them
	v       ferry.Verifier
	sign    func(body []byte, at time.Time) http.Header
}

func detailVerifiers(t *testing.T) []detailVerifier {
	t.Helper()
	must := func(h http.Header, err error) http.Header {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	build := func(name string, opts provider.Options) ferry.Verifier {
		t.Helper()
		opts.Now = clock
		v, err := provider.New(name, opts)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	stripeSecret := "whsec_" + markSecret
	swSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(markSecret))
	hmacBody := provider.HMACOptions{Header: "X-Sig", Prefix: "sha256=", EventIDHeader: "X-Id", TypeHeader: "X-Type"}
	hmacField := provider.HMACOptions{Header: "X-Sig", Encoding: provider.EncodingBase64, Algorithm: provider.AlgorithmSHA1, EventIDField: "id", TypeField: "type"}
	hmacIDTS := provider.HMACOptions{Header: "X-Sig", Prefix: "v1=", Mode: provider.HMACModeIDTimestampBody, EventIDHeader: "X-Id", TimestampHeader: "X-Ts"}
	return []detailVerifier{
		{"stripe", []string{stripeSecret, markSecret}, build("stripe", provider.Options{Secrets: []string{stripeSecret}}),
			func(body []byte, at time.Time) http.Header { return ferrytest.SignStripe(stripeSecret, body, at) }},
		{"github", []string{markSecret}, build("github", provider.Options{Secrets: []string{markSecret}}),
			func(body []byte, _ time.Time) http.Header {
				return ferrytest.SignGitHub(markSecret, markID, "push", body)
			}},
		{"shopify", []string{markSecret}, build("shopify", provider.Options{Secrets: []string{markSecret}}),
			func(body []byte, _ time.Time) http.Header {
				return ferrytest.SignShopify(markSecret, markID, "orders/create", body)
			}},
		{"standardwebhooks", []string{swSecret, markSecret}, build("standardwebhooks", provider.Options{Secrets: []string{swSecret}}),
			func(body []byte, at time.Time) http.Header {
				return must(ferrytest.SignStandardWebhooks(swSecret, markID, at, body))
			}},
		{"hmac body", []string{markSecret}, build("hmac", provider.Options{Secrets: []string{markSecret}, HMAC: hmacBody}),
			func(body []byte, _ time.Time) http.Header {
				h := must(ferrytest.SignHMAC(markSecret, hmacBody, body))
				h.Set("X-Id", markID)
				h.Set("X-Type", markValue)
				return h
			}},
		{"hmac field", []string{markSecret}, build("hmac", provider.Options{Secrets: []string{markSecret}, HMAC: hmacField}),
			func(body []byte, _ time.Time) http.Header {
				return must(ferrytest.SignHMAC(markSecret, hmacField, body))
			}},
		{"hmac id.timestamp.body", []string{markSecret}, build("hmac", provider.Options{Secrets: []string{markSecret}, HMAC: hmacIDTS}),
			func(body []byte, at time.Time) http.Header {
				return must(ferrytest.SignHMACEvent(markSecret, hmacIDTS, markID, at, body))
			}},
	}
}

// headerMutations turn one header value into others a sender might send:
// cut, stripped of a prefix, dressed with a marker, replaced.
var headerMutations = []func(string) string{
	func(string) string { return "" },
	func(v string) string { return v[:len(v)/2] },
	func(v string) string { return v[min(len(v), 3):] },
	func(v string) string { return v[min(len(v), 7):] },
	func(v string) string { return v + markValue },
	func(v string) string { return markValue + v },
	func(v string) string { return strings.ToUpper(v) },
	func(string) string { return markValue },
	func(v string) string { return v + ",v1=" + markValue },
	func(v string) string { return "v1," + markValue + " " + v },
	func(v string) string { return "t=" + markValue + "," + v },
	func(v string) string { return strings.ReplaceAll(v, "=", "="+markValue) },
}

// TestVerifyErrorsHoldNoValue: every verifier, given genuine deliveries
// with each header cut, stripped or dressed, a body without an id or not
// JSON, or a time out of tolerance, fails with a ferry.VerifyError whose
// detail and text hold no secret, no header value sent (signatures
// included) and no payload byte: the receiver answers the detail to anyone
// and logs it.
func TestVerifyErrorsHoldNoValue(t *testing.T) {
	t.Parallel()
	bodies := []string{
		`{"id":"` + markID + `","type":"t","note":"` + markBody + `"}`,
		`{"type":"t","note":"` + markBody + `"}`,
		`{"id":{"x":"` + markBody + `"}}`,
		`not json ` + markBody,
	}
	for _, dv := range detailVerifiers(t) {
		t.Run(dv.name, func(t *testing.T) {
			t.Parallel()
			failures := 0
			check := func(h http.Header, body []byte) {
				t.Helper()
				_, err := dv.v.Verify(h, body)
				if err == nil {
					return
				}
				failures++
				ve, ok := errors.AsType[*ferry.VerifyError](err)
				if !ok {
					t.Fatalf("error %v is not a *ferry.VerifyError", err)
				}
				forbidden := append([]string{markSecret, markID, markBody, markValue}, dv.secrets...)
				for _, values := range h {
					for _, v := range values {
						forbidden = append(forbidden, valueParts(v)...)
					}
				}
				for _, f := range forbidden {
					if strings.Contains(ve.Detail, f) || strings.Contains(err.Error(), f) {
						t.Fatalf("error %q (detail %q) holds %q", err, ve.Detail, f)
					}
				}
			}
			for _, body := range bodies {
				for _, at := range []time.Time{now, now.Add(-time.Hour), now.Add(time.Hour)} {
					signed := dv.sign([]byte(body), at)
					check(signed, []byte(body))
					for _, name := range slices.Sorted(maps.Keys(signed)) {
						for _, mutate := range headerMutations {
							check(with(signed, name, mutate(signed.Get(name))), []byte(body))
						}
					}
				}
			}
			if failures == 0 {
				t.Fatal("no delivery failed: the table checks nothing")
			}
		})
	}
}

// valueParts returns a header value and every long piece of it (a MAC
// without its "v1=" or "sha256=" dressing); pieces shorter than 8 bytes
// ("v1", a prefix) may be named by a detail.
func valueParts(v string) []string {
	var parts []string
	if len(v) >= 8 {
		parts = append(parts, v)
	}
	for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '=' || r == ' ' }) {
		if len(p) >= 8 {
			parts = append(parts, p)
		}
	}
	return parts
}
