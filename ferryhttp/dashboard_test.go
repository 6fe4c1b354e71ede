package ferryhttp_test

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/sqlite"
)

type dashBundle struct {
	store  *sqlite.Store
	server *httptest.Server
	ids    map[string]int64
	logs   *syncBuffer
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
	b := &dashBundle{ids: map[string]int64{}, logs: &syncBuffer{}}
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
	b.server = httptest.NewServer(a)
	t.Cleanup(b.server.Close)
	return b
}

func get(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func newReq(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestDashboardPages(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{PageSize: 2}, ferryhttp.AdminOptions{})

	code, body := get(t, newReq(t, "GET", b.server.URL+"/ui/", nil))
	if code != 200 {
		t.Fatalf("overview: %d %s", code, body)
	}
	atRisk, rest, _ := strings.Cut(body, `id="counts"`)
	if !strings.Contains(atRisk, "evt_old") || strings.Contains(atRisk, "evt_dead") {
		t.Errorf("the at-risk section must list evt_old, and only it:\n%s", atRisk)
	}
	if !strings.Contains(rest, "Replay all 1 dead") || !strings.Contains(rest, `id="next-page"`) {
		t.Errorf("overview lacks the bulk replay button or pagination:\n%s", rest)
	}

	_, body = get(t, newReq(t, "GET", b.server.URL+"/ui/?state=dead", nil))
	_, table, _ := strings.Cut(body, `id="event-table"`)
	if !strings.Contains(table, "evt_dead") || strings.Contains(table, "gh_1") {
		t.Errorf("state=dead filter:\n%s", table)
	}
	_, body = get(t, newReq(t, "GET", b.server.URL+"/ui/?q=gh_", nil))
	if _, table, _ = strings.Cut(body, `id="event-table"`); !strings.Contains(table, "gh_1") || strings.Contains(table, "evt_dead") {
		t.Errorf("q=gh_ filter:\n%s", table)
	}

	code, body = get(t, newReq(t, "GET", b.server.URL+"/ui/events/"+itoa(b.ids["evt_dead"]), nil))
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
	_, body = get(t, newReq(t, "GET", b.server.URL+"/ui/events/"+itoa(b.ids["gh_1"]), nil))
	_, replays, _ := strings.Cut(body, `id="replays"`)
	if !strings.Contains(body, `id="replay-alert"`) || !strings.Contains(replays, "gh_forged") || !strings.Contains(replays, "delete") {
		t.Errorf("event page of a replayed body does not flag and list the replay:\n%s", body)
	}
	if code, _ := get(t, newReq(t, "GET", b.server.URL+"/ui/events/999999", nil)); code != 404 {
		t.Errorf("missing event: %d, want 404", code)
	}
}

func TestDashboardReplayAndCSRF(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	replay := b.server.URL + "/ui/events/" + itoa(b.ids["evt_dead"]) + "/replay"

	req := newReq(t, "POST", replay, nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if code, _ := get(t, req); code != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", code)
	}
	req = newReq(t, "POST", replay, nil)
	req.Header.Set("Origin", "https://evil.example")
	if code, _ := get(t, req); code != http.StatusForbidden {
		t.Errorf("cross-origin POST: %d, want 403", code)
	}
	e, _ := b.store.EventGet(context.Background(), &ferry.EventGetParams{ID: b.ids["evt_dead"]})
	if e.State != ferry.StateDead {
		t.Fatalf("a refused POST changed the event to %s", e.State)
	}

	req = newReq(t, "POST", replay, nil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	code, body := get(t, req)
	if code != 200 || !strings.Contains(body, "replayed") || !strings.Contains(body, `data-state="pending"`) {
		t.Errorf("same-origin replay: %d\n%s", code, body)
	}
	// Who did it is kept with the event and on its page.
	if _, actions, _ := strings.Cut(body, `id="actions"`); !strings.Contains(actions, "<td>replay</td><td>anonymous</td>") {
		t.Errorf("the event page does not list the replay and its actor:\n%s", body)
	}
	// Without credentials the actor is "anonymous": anyone on loopback.
	if logs := b.logs.String(); !strings.Contains(logs, `msg="ferry: dashboard replay"`) || !strings.Contains(logs, "actor=anonymous") || strings.Contains(logs, "Ada") {
		t.Errorf("the replay's log line must name the actor and never the payload:\n%s", logs)
	}

	req = newReq(t, "POST", b.server.URL+"/ui/replay", strings.NewReader("source=stripe"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if code, body := get(t, req); code != 200 || !strings.Contains(body, "replayed 0 dead events of stripe") {
		t.Errorf("bulk replay: %d\n%s", code, body)
	}
	if logs := b.logs.String(); !strings.Contains(logs, `msg="ferry: dashboard replay of dead events" source=stripe replayed=0 actor=anonymous`) {
		t.Errorf("the bulk replay's log line must name the actor:\n%s", logs)
	}
}

// TestAdminRefusesRebinding: without credentials, a page on a DNS name that
// resolves to 127.0.0.1 cannot read the dashboard; an IP literal and
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
		"ferry-admin.internal:8081":   200,
		"ferry-admin.internal.evil.x": http.StatusForbidden,
	} {
		req := newReq(t, "GET", b.server.URL+"/ui/events/"+itoa(b.ids["evt_dead"]), nil)
		req.Host = host
		code, body := get(t, req)
		if code != want {
			t.Errorf("Host %s: %d, want %d", host, code, want)
		}
		if want != 200 && strings.Contains(body, "Ada") {
			t.Errorf("Host %s: the payload leaked", host)
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
		req := forged(newReq(t, "POST", event+"/replay", nil))
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if res := do(t, req); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("anonymous replay: %d, want 401", res.StatusCode)
		}
		if e, _ := b.store.EventGet(context.Background(), &ferry.EventGetParams{ID: b.ids["evt_dead"]}); e.State != ferry.StateDead {
			t.Fatalf("an anonymous POST changed the event to %s", e.State)
		}
	})

	t.Run("BearerAndBasic", func(t *testing.T) {
		for _, path := range []string{"/ui/", "/metrics"} {
			req := newReq(t, "GET", b.server.URL+path, nil)
			req.Header.Set("Authorization", "Bearer s3cret-token")
			if res := do(t, req); res.StatusCode != 200 {
				t.Errorf("bearer %s: %d", path, res.StatusCode)
			}
			req = newReq(t, "GET", b.server.URL+path, nil)
			req.SetBasicAuth("ops", "pw")
			if res := do(t, req); res.StatusCode != 200 {
				t.Errorf("basic %s: %d", path, res.StatusCode)
			}
		}
		for _, bad := range []func(*http.Request){
			func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") },
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
		withCookie := func(method, url string, c *http.Cookie) *http.Request {
			req := newReq(t, method, url, nil)
			req.AddCookie(c)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			return req
		}
		if code, body := get(t, withCookie("GET", b.server.URL+"/ui/", c)); code != 200 || !strings.Contains(body, `id="actor">ci-bot<`) || !strings.Contains(body, `id="sign-out"`) {
			t.Errorf("session: %d, or the page does not say who is signed in:\n%s", code, body)
		}
		// The actor is inside the signature: naming another one breaks it.
		parts := strings.SplitN(c.Value, ".", 2)
		tampered := *c
		tampered.Value = base64.RawURLEncoding.EncodeToString([]byte("ops")) + "." + parts[1]
		if res := do(t, withCookie("GET", event, &tampered)); res.StatusCode != http.StatusSeeOther {
			t.Errorf("a cookie with another actor: %d, want 303 to the login", res.StatusCode)
		}

		if code, _ := get(t, withCookie("POST", event+"/replay", c)); code != 200 {
			t.Fatalf("replay with a session: %d", code)
		}
		if logs := b.logs.String(); !strings.Contains(logs, `msg="ferry: dashboard replay" id=`+itoa(b.ids["evt_dead"])+` replayed=1 actor=ci-bot`) {
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
	})

	t.Run("UserLogin", func(t *testing.T) {
		if res := login(t, url.Values{"user": {"ops"}, "password": {"nope-guess"}}); res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
			t.Errorf("wrong password: %d %v", res.StatusCode, res.Cookies())
		}
		if logs := b.logs.String(); !strings.Contains(logs, "ferry: admin login refused") || strings.Contains(logs, "nope-guess") {
			t.Errorf("a refused login is logged without what was typed:\n%s", logs)
		}
		res := login(t, url.Values{"user": {"ops"}, "password": {"pw"}})
		if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
			t.Fatalf("login: %d", res.StatusCode)
		}
		req := newReq(t, "GET", b.server.URL+"/ui/", nil)
		req.AddCookie(res.Cookies()[0])
		if code, body := get(t, req); code != 200 || !strings.Contains(body, `id="actor">ops<`) {
			t.Errorf("user session: %d\n%s", code, body)
		}
	})
}

// TestAdminSessionExpiresAndSecure: a session ends at its TTL on the
// Admin's clock, and its cookie is Secure when the public URL is https.
func TestAdminSessionExpiresAndSecure(t *testing.T) {
	t.Parallel()
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{
		Token: "s3cret-token", PublicURL: "https://ferry-admin.example.com", SessionTTL: time.Hour,
		Now: func() time.Time { return *now.Load() },
	})
	req := newReq(t, "POST", b.server.URL+"/ui/login", strings.NewReader("token=s3cret-token"))
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
	req = newReq(t, "POST", b.server.URL+"/ui/events/"+itoa(b.ids["evt_dead"])+"/replay", nil)
	req.AddCookie(c)
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

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
