package ferryhttp_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/prometheus"
	"github.com/ferry-inbox/ferry/provider"
	"github.com/ferry-inbox/ferry/sqlite"
)

// TestReceiverStandardWebhooksSignatureList: through the real receiver, a
// signature list with a forged entry beside the valid one is accepted and
// stored; a list of only forged, unreadable or wrong entries is 401 and
// stores nothing.
func TestReceiverStandardWebhooksSignatureList(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) ferry.Store) {
		b := setup(t, open(t), nil)
		const body = `{"type":"user.created"}`

		d := standardWebhooks(swSecret, "msg_list_ok", body, testNow)
		valid := d.header.Get("Webhook-Signature")
		r := b.send(t, d.with("Webhook-Signature", "v1,Zm9yZ2Vk "+valid))
		if r.status != 200 || !maps.Equal(r.body, accepted) {
			t.Fatalf("forged entry beside the valid one: %d %s, want 200 accepted", r.status, r.raw)
		}
		if event(t, b.store, "standardwebhooks", "msg_list_ok") == nil {
			t.Fatal("accepted but not stored")
		}

		wrong := standardWebhooks(swSecret, "msg_list_bad", `{"other":1}`, testNow).header.Get("Webhook-Signature")
		for _, list := range []struct {
			sig  string
			want map[string]string
		}{
			{"v1,Zm9yZ2Vk", rejectedWith("malformed_signature", "no readable v1 signature")},
			{"v1,Zm9yZ2Vk v1,!!! v2," + valid[3:] + " nocomma", rejectedWith("malformed_signature", "no readable v1 signature")},
			{"v1,Zm9yZ2Vk " + wrong, rejected("bad_signature")},
		} {
			d := standardWebhooks(swSecret, "msg_list_bad", body, testNow).with("Webhook-Signature", list.sig)
			r := b.send(t, d)
			if r.status != 401 || !maps.Equal(r.body, list.want) {
				t.Errorf("%q: %d %s, want 401 %v", strings.ReplaceAll(list.sig, valid[3:], "<valid>"), r.status, r.raw, list.want)
			}
		}
		if event(t, b.store, "standardwebhooks", "msg_list_bad") != nil {
			t.Fatal("a rejected delivery was stored")
		}
	})
}

// TestReceiverUnstorableIdentity: on both stores, through the real receiver,
// a correctly signed delivery whose event id or type no store can keep the
// same way is 400 (never a 503 the provider would retry for days), is not
// stored, is counted in ferry_received_total and is logged without the
// value; the next normal delivery is 200 and stored.
func TestReceiverUnstorableIdentity(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) ferry.Store) {
		reg := prom.NewRegistry()
		metrics := prometheus.NewMetrics(reg, []string{"stripe", "github", "shopify", "standardwebhooks", "hmac"})
		b := setup(t, open(t), func(o *ferryhttp.ReceiverOptions) { o.Observer = metrics })

		// Every bad value carries the marker, so the log can be searched
		// for it.
		const marker = "IDMARK"
		// Long values are not repetitive: PostgreSQL compresses a
		// repetitive key until it fits its index.
		long := func(n int) string {
			var sb strings.Builder
			sb.WriteString(marker)
			for i := 0; sb.Len() < n; i++ {
				sum := sha256.Sum256([]byte(strconv.Itoa(i)))
				sb.WriteString(hex.EncodeToString(sum[:]))
			}
			return sb.String()[:n]
		}
		stripeEvent := func(id, typ string) string {
			body, err := json.Marshal(map[string]string{"id": id, "type": typ})
			if err != nil {
				t.Fatal(err)
			}
			return string(body)
		}
		cases := []struct {
			name   string
			d      delivery
			reason string
			detail string // the body field a verifier names, if any
		}{
			{"stripe id 3000 bytes", stripe(stripeEvent(long(3000), "invoice.paid")), "bad_event_id", ""},
			{"stripe id 9000 bytes", stripe(stripeEvent(long(9000), "invoice.paid")), "bad_event_id", ""},
			{"stripe id with NUL", stripe(stripeEvent(marker+"\x00", "invoice.paid")), "bad_event_id", ""},
			{"stripe id with a line break", stripe(stripeEvent(marker+"\nlevel=ERROR", "invoice.paid")), "bad_event_id", ""},
			// Written by hand: json.Marshal would mend the bytes. Two ids
			// that Go's decoder alone would make one ("IDMARK\uFFFD\uFFFD").
			{"stripe body id invalid UTF-8", stripe(`{"id":"` + marker + "\xff\xfe" + `","type":"invoice.paid"}`), "bad_event_id", `body field "id" is not UTF-8 text`},
			{"stripe body id other invalid UTF-8", stripe(`{"id":"` + marker + "\xfe\xfd" + `","type":"invoice.paid"}`), "bad_event_id", `body field "id" is not UTF-8 text`},
			{"github id 3000 bytes", github(githubSecret, long(3000), `{}`), "bad_event_id", ""},
			{"github id 9000 bytes", github(githubSecret, long(9000), `{}`), "bad_event_id", ""},
			{"github id invalid UTF-8", github(githubSecret, marker+"\xff\xfe", `{}`), "bad_event_id", ""},
			{"shopify id invalid UTF-8", shopify(shopifySecret, marker+"\xc3", `{}`), "bad_event_id", ""},
			{"standardwebhooks id 3000 bytes", standardWebhooks(swSecret, long(3000), `{}`, testNow), "bad_event_id", ""},
			{"standardwebhooks id with a right-to-left override", standardWebhooks(swSecret, marker+"\u202egpj.exe", `{}`, testNow), "bad_event_id", ""},
			{"hmac id 9000 bytes", hmacDelivery(hmacSecret, long(9000), `{}`), "bad_event_id", ""},
			{"stripe type with NUL", stripe(stripeEvent("evt_badtype", marker+"\x00")), "bad_event_type", ""},
			{"stripe type 3000 bytes", stripe(stripeEvent("evt_badtype", long(3000))), "bad_event_type", ""},
			{"stripe body type invalid UTF-8", stripe(`{"id":"evt_badtype","type":"` + marker + "\xff" + `"}`), "bad_event_type", `body field "type" is not UTF-8 text`},
			{"github type invalid UTF-8", github(githubSecret, "gh-badtype", `{}`).with("X-GitHub-Event", marker+"\xff"), "bad_event_type", ""},
		}
		for _, tc := range cases {
			r := b.send(t, tc.d)
			want := rejected(tc.reason)
			if tc.detail != "" {
				want = rejectedWith(tc.reason, tc.detail)
			}
			if r.status != 400 || !maps.Equal(r.body, want) {
				t.Errorf("%s: %d %s, want 400 %s", tc.name, r.status, r.raw, tc.reason)
			}
		}
		if ev := event(t, b.store, "stripe", "evt_badtype"); ev != nil {
			t.Error("a delivery with a bad type was stored")
		}
		if ev := event(t, b.store, "github", "gh-badtype"); ev != nil {
			t.Error("a delivery with a bad type was stored")
		}
		list, err := b.store.EventList(t.Context(), &ferry.EventListParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Events) != 0 {
			t.Fatalf("%d events stored from rejected deliveries", len(list.Events))
		}

		// The next normal delivery goes through.
		if r := b.send(t, github(githubSecret, "gh-after", `{}`)); r.status != 200 || !maps.Equal(r.body, accepted) {
			t.Fatalf("normal delivery after them: %d %s", r.status, r.raw)
		}
		if event(t, b.store, "github", "gh-after") == nil {
			t.Fatal("normal delivery answered 200 but not stored")
		}

		if logs := b.logs.String(); strings.Contains(logs, marker) {
			t.Errorf("the log quotes a rejected id or type:\n%.2000s", logs)
		}
		if n := strings.Count(b.logs.String(), `"reason":"bad_event_id"`); n != 13 {
			t.Errorf("%d log lines with reason bad_event_id, want 13", n)
		}
		counted := map[string]float64{}
		for _, source := range []string{"stripe", "github", "shopify", "standardwebhooks", "hmac"} {
			for _, reason := range []string{"bad_event_id", "bad_event_type"} {
				counted[source+"/"+reason] = receivedTotal(t, reg, source, "rejected", reason)
			}
		}
		want := map[string]float64{
			"stripe/bad_event_id": 6, "github/bad_event_id": 3, "shopify/bad_event_id": 1,
			"standardwebhooks/bad_event_id": 2, "hmac/bad_event_id": 1,
			"stripe/bad_event_type": 3, "github/bad_event_type": 1,
		}
		for k, n := range counted {
			if n != want[k] {
				t.Errorf("ferry_received_total{%s} = %v, want %v", k, n, want[k])
			}
		}
	})
}

// receivedTotal reads ferry_received_total for one label set from reg; 0 if
// the series does not exist.
func receivedTotal(t *testing.T, reg *prom.Registry, source, outcome, reason string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"source": source, "outcome": outcome, "reason": reason}
	for _, f := range families {
		if f.GetName() != "ferry_received_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// nilVerifier is a Verifier type whose nil pointer panics when used.
type nilVerifier struct{ secret []byte }

func (v *nilVerifier) Verify(http.Header, []byte) (*ferry.Verified, error) {
	_ = v.secret[0]
	return nil, ferry.ErrBadSignature
}

// TestNewReceiverRefusesNilVerifier: a nil verifier is refused at start
// however it is wrapped, and so is what provider.New returns with an error.
func TestNewReceiverRefusesNilVerifier(t *testing.T) {
	t.Parallel()
	st := teststore.SQLite(t, nil)
	var typedNil *provider.Stripe
	var nilFunc verifierFunc
	failed, err := provider.New("stripe", provider.Options{})
	if err == nil {
		t.Fatal("provider.New without secrets succeeded")
	}
	for name, v := range map[string]ferry.Verifier{
		"nil interface":                nil,
		"typed nil pointer":            typedNil,
		"typed nil of the user's type": (*nilVerifier)(nil),
		"nil func":                     nilFunc,
		"nil inside a wrapping struct": struct{ ferry.Verifier }{},
		"provider.New's error result":  failed,
		"wrapped typed nil":            struct{ ferry.Verifier }{typedNil},
	} {
		_, err := ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{Store: st, Sources: []ferryhttp.Source{{Name: "s", Verifier: v}}})
		if err == nil {
			t.Errorf("%s: NewReceiver accepted it", name)
		}
	}
	var typedNilStore *sqlite.Store
	_, err = ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{Store: typedNilStore, Sources: sources(t)})
	if err == nil {
		t.Error("NewReceiver accepted a typed nil store")
	}
	// The checks refuse only what is nil: a decorator around a working
	// verifier is fine, whatever else it embeds.
	working := sources(t)[0].Verifier
	decorated := struct {
		*strings.Builder
		ferry.Verifier
	}{nil, working}
	srcs := append(sources(t), ferryhttp.Source{Name: "decorated", Verifier: decorated})
	if _, err := ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{Store: st, Sources: srcs}); err != nil {
		t.Fatalf("NewReceiver refused working verifiers: %v", err)
	}
}

// verifierFunc adapts a function to ferry.Verifier.
type verifierFunc func(http.Header, []byte) (*ferry.Verified, error)

func (f verifierFunc) Verify(h http.Header, b []byte) (*ferry.Verified, error) { return f(h, b) }

// TestReceiverHMACIDTimestampReplay: a generic HMAC source that signs the id
// and a timestamp (provider.HMACModeIDTimestampBody) refuses a captured
// delivery re-sent five times under new ids and another type; the app's
// store holds the original once, as the original type.
func TestReceiverHMACIDTimestampReplay(t *testing.T) {
	t.Parallel()
	scheme := provider.HMACOptions{
		Header: "X-Acme-Signature", Prefix: "sha256=", Mode: provider.HMACModeIDTimestampBody,
		EventIDHeader: "X-Acme-Event-Id", TimestampHeader: "X-Acme-Timestamp", TypeHeader: "X-Acme-Event-Type",
	}
	forEachStore(t, func(t *testing.T, open func(testing.TB) ferry.Store) {
		b := setup(t, open(t), func(o *ferryhttp.ReceiverOptions) {
			v, err := provider.New("hmac", provider.Options{
				Secrets: []string{hmacSecret}, HMAC: scheme, Now: func() time.Time { return testNow },
			})
			if err != nil {
				t.Fatal(err)
			}
			o.Sources = append(o.Sources, ferryhttp.Source{Name: "acme", Verifier: v})
		})
		const body = `{"order":7}`
		h, err := ferrytest.SignHMACEvent(hmacSecret, scheme, "acme-1", testNow, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		h.Set("X-Acme-Event-Type", "order.paid")
		captured := delivery{source: "acme", header: h, body: []byte(body)}
		if r := b.send(t, captured); r.status != 200 || !maps.Equal(r.body, accepted) {
			t.Fatalf("original: %d %s", r.status, r.raw)
		}
		for i := range 5 {
			replay := captured.with("X-Acme-Event-Id", fmt.Sprintf("acme-replay-%d", i)).with("X-Acme-Event-Type", "order.refunded")
			if r := b.send(t, replay); r.status != 401 || !maps.Equal(r.body, rejected("bad_signature")) {
				t.Fatalf("replay %d: %d %s, want 401 bad_signature", i, r.status, r.raw)
			}
		}
		list, err := b.store.EventList(t.Context(), &ferry.EventListParams{Source: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Events) != 1 || list.Events[0].EventID != "acme-1" || list.Events[0].Type != "order.paid" {
			t.Fatalf("stored %d events, want only acme-1 as order.paid", len(list.Events))
		}
	})
}
