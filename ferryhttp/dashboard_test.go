package ferryhttp_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
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
}

// setupDashboard seeds a SQLite store and serves a dashboard on loopback:
//
//	stripe/evt_dead  dead, with a Stripe-Signature-like header that must be redacted
//	stripe/evt_old   pending, received 70h ago: at risk (60h)
//	github/gh_1      pending
func setupDashboard(t *testing.T, opts ferryhttp.DashboardOptions) *dashBundle {
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
	b := &dashBundle{ids: map[string]int64{}}
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

	opts.Store = b.store
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.AtRiskAfter = map[string]time.Duration{"stripe": 60 * time.Hour, "github": 60 * time.Hour}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	d, err := ferryhttp.NewDashboard(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	d.Register(mux)
	b.server = httptest.NewServer(mux)
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
	b := setupDashboard(t, ferryhttp.DashboardOptions{PageSize: 2})

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
	if code, _ := get(t, newReq(t, "GET", b.server.URL+"/ui/events/999999", nil)); code != 404 {
		t.Errorf("missing event: %d, want 404", code)
	}
}

func TestDashboardReplayAndCSRF(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{})
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
	if code, body := get(t, req); code != 200 || !strings.Contains(body, "replayed") || !strings.Contains(body, `data-state="pending"`) {
		t.Errorf("same-origin replay: %d\n%s", code, body)
	}

	// DNS rebinding: a page on another name that resolves to 127.0.0.1.
	req = newReq(t, "GET", b.server.URL+"/ui/", nil)
	req.Host = "attacker.example"
	if code, _ := get(t, req); code != http.StatusForbidden {
		t.Errorf("foreign Host without credentials: %d, want 403", code)
	}
}

func TestDashboardAuth(t *testing.T) {
	t.Parallel()
	_, err := ferryhttp.NewDashboard(ferryhttp.DashboardOptions{Store: &sqlite.Store{}, Addr: "0.0.0.0:8080"})
	if !errors.Is(err, ferryhttp.ErrDashboardExposed) {
		t.Errorf("no credentials on 0.0.0.0: err = %v, want ErrDashboardExposed", err)
	}

	b := setupDashboard(t, ferryhttp.DashboardOptions{Addr: "0.0.0.0:8080", Token: "s3cret", User: "ops", Password: "pw"})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(req *http.Request) int {
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := do(newReq(t, "GET", b.server.URL+"/ui/", nil)); code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", code)
	}
	req := newReq(t, "GET", b.server.URL+"/ui/", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if code := do(req); code != 200 {
		t.Errorf("bearer token: %d", code)
	}
	req = newReq(t, "GET", b.server.URL+"/ui/", nil)
	req.SetBasicAuth("ops", "wrong")
	if code := do(req); code != http.StatusUnauthorized {
		t.Errorf("wrong password: %d", code)
	}
	req.SetBasicAuth("ops", "pw")
	if code := do(req); code != 200 {
		t.Errorf("basic auth: %d", code)
	}
	req = newReq(t, "POST", b.server.URL+"/ui/login", strings.NewReader(url.Values{"token": {"s3cret"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 || !res.Cookies()[0].HttpOnly || res.Cookies()[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d %v", res.StatusCode, res.Cookies())
	}
	req = newReq(t, "GET", b.server.URL+"/ui/", nil)
	req.AddCookie(res.Cookies()[0])
	if code := do(req); code != 200 {
		t.Errorf("login cookie: %d", code)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
