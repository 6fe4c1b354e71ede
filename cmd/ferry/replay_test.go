package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/provider"
)

// acmeScheme is the generic HMAC sender of TestServeReplayedBodies, in body
// mode: the id and type travel in unsigned headers.
var acmeScheme = provider.HMACOptions{
	Header: "X-Acme-Signature", Prefix: "sha256=",
	EventIDHeader: "X-Acme-Event-Id", TypeHeader: "X-Acme-Event-Type",
}

// TestServeReplayedBodies is issue 10's "must show" through a real
// `ferry serve` and a local app: a captured GitHub, Shopify and body-mode
// HMAC delivery, re-sent 5 times under new ids and another type, reaches
// the app once, as the original type. Replay detection is on by default
// for these providers: the config does not mention it.
func TestServeReplayedBodies(t *testing.T) {
	t.Parallel()
	for _, kind := range []struct {
		name string
		open func(t *testing.T) (url string, st ferry.Store)
	}{
		{"sqlite", func(t *testing.T) (string, ferry.Store) {
			path := filepath.Join(t.TempDir(), "ferry.db")
			return "sqlite:" + path, teststore.OpenSQLite(t, path, nil)
		}},
		{"postgres", func(t *testing.T) (string, ferry.Store) {
			pool, schema := pgtest.Schema(t)
			st := postgres.New(pool, nil)
			t.Cleanup(st.Close)
			return pgtest.ConnString(schema), st
		}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			app, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
			storeURL, st := kind.open(t)
			cfg := writeReplayConfig(t, storeURL, appSrv.URL)
			p := startServe(t, cfg)

			const body = `{"action":"opened","number":7,"secret_marker":"PAYLOADMARK"}`
			type sender struct {
				source, originalID, originalType string
				sign                             func(id, typ string) http.Header
			}
			senders := []sender{
				{"github", "gh-1", "push", func(id, typ string) http.Header {
					return ferrytest.SignGitHub("gh_secret", id, typ, []byte(body))
				}},
				{"shopify", "shop-1", "orders/create", func(id, typ string) http.Header {
					return ferrytest.SignShopify("shop_secret", id, typ, []byte(body))
				}},
				{"acme", "acme-1", "thing.created", func(id, typ string) http.Header {
					h, err := ferrytest.SignHMAC("acme_secret", acmeScheme, []byte(body))
					if err != nil {
						t.Fatal(err)
					}
					h.Set("X-Acme-Event-Id", id)
					h.Set("X-Acme-Event-Type", typ)
					return h
				}},
			}
			post := func(source string, h http.Header) (int, string) {
				req, err := http.NewRequest(http.MethodPost, "http://"+p.addr+"/webhooks/"+source, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header = h
				code, answer := testhttp.Do(t, req)
				return code, strings.TrimSpace(answer)
			}
			for _, s := range senders {
				if code, answer := post(s.source, s.sign(s.originalID, s.originalType)); code != 200 || answer != `{"status":"accepted"}` {
					t.Fatalf("%s original: %d %s", s.source, code, answer)
				}
				// The captured delivery, re-sent under new ids and a type
				// of the attacker's choosing: the signature still verifies.
				for i := range 5 {
					code, answer := post(s.source, s.sign(fmt.Sprintf("%s-forged-%d", s.source, i), "delete"))
					if code != 200 || answer != `{"status":"replay"}` {
						t.Fatalf("%s replay %d: %d %s, want 200 replay", s.source, i, code, answer)
					}
				}
			}

			// Every stored event is done: nothing is left to forward, so
			// what the app got is all it will get.
			waitFor(t, 60*time.Second, "the originals to be done", func() bool {
				page, err := st.EventList(context.Background(), &ferry.EventListParams{})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page.Events {
					if e.State != ferry.StateDone {
						return false
					}
				}
				return len(page.Events) == len(senders)
			})
			if n := app.count(); n != len(senders) {
				t.Fatalf("the app got %d requests, want %d: one per original", n, len(senders))
			}
			got := map[string]string{}
			for _, r := range app.requests {
				got[r.Header.Get("Ferry-Source")] = r.Header.Get("Ferry-Event-Id") + " " + r.Header.Get("Ferry-Event-Type")
			}
			for _, s := range senders {
				if want := s.originalID + " " + s.originalType; got[s.source] != want {
					t.Errorf("%s reached the app as %q, want %q", s.source, got[s.source], want)
				}
				e, err := st.EventGet(context.Background(), &ferry.EventGetParams{Source: s.source, EventID: s.originalID})
				if err != nil || e.Replays != 5 {
					t.Errorf("%s original: replays %v, %v; want 5", s.source, e, err)
				}
			}

			// An operator sees them: the metric on the admin listener,
			// one warning per replay in the log, `ferry events show`.
			_, metrics := testhttp.Get(t, "http://"+p.admin+"/metrics")
			for _, s := range senders {
				want := fmt.Sprintf(`ferry_received_total{outcome="replay",reason="",source=%q} 5`, s.source)
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			log := p.log()
			if n := strings.Count(log, `"alert":"suspected_replay"`); n != 15 {
				t.Errorf("%d suspected_replay log lines, want 15", n)
			}
			if strings.Contains(log, "PAYLOADMARK") || strings.Contains(log, "sha256=") {
				t.Errorf("the log holds a payload or a signature:\n%s", log)
			}
			stdout, stderr, code := runFerry(t, "events", "show", "--config", cfg, "github", "gh-1")
			if code != 0 || !strings.Contains(stdout, "SUSPECTED REPLAY") || !strings.Contains(stdout, "github-forged-4") {
				t.Errorf("events show: exit %d\n%s\n%s", code, stdout, stderr)
			}
		})
	}
}

// writeReplayConfig writes a config with a GitHub, a Shopify and a
// body-mode HMAC source, all forwarding to appURL.
func writeReplayConfig(t *testing.T, storeURL, appURL string) string {
	t.Helper()
	return writeServeConfig(t, storeURL, fmt.Sprintf(`[[source]]
name = "github"
provider = "github"
secrets = ["gh_secret"]
[source.forward]
url = %[1]q
[[source]]
name = "shopify"
provider = "shopify"
secrets = ["shop_secret"]
[source.forward]
url = %[1]q
[[source]]
name = "acme"
provider = "hmac"
secrets = ["acme_secret"]
[source.hmac]
header = "X-Acme-Signature"
prefix = "sha256="
event_id_header = "X-Acme-Event-Id"
type_header = "X-Acme-Event-Type"
[source.forward]
url = %[1]q
`, appURL))
}
