package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/catchup"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/sqlite"
)

const stripeAPIKey = "sk_test_e2eSECRETkey0123456789"

// stripeAPI is a fake of Stripe's GET /v1/events: the events created
// within the window, a page of at most limit, newest first, with the bodies
// sendStripe posts. It refuses a listing not filtered to the types
// withCatchup configures.
func stripeAPI(t *testing.T, ids []string, created time.Time) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer "+stripeAPIKey {
			http.Error(w, `{"error":{}}`, http.StatusUnauthorized)
			return
		}
		q := r.URL.Query()
		if !slices.Equal(q["types[]"], []string{"invoice.paid"}) {
			http.Error(w, `{"error":{"message":"want types[]=invoice.paid"}}`, http.StatusBadRequest)
			return
		}
		limit, _ := strconv.Atoi(q.Get("limit"))
		gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
		lte, _ := strconv.ParseInt(q.Get("created[lte]"), 10, 64)
		var page []string
		started := q.Get("starting_after") == ""
		for i := len(ids) - 1; i >= 0; i-- { // newest first
			if !started {
				started = ids[i] == q.Get("starting_after")
				continue
			}
			if at := created.Add(time.Duration(i) * time.Second).Unix(); at < gte || at > lte {
				continue
			}
			page = append(page, fmt.Sprintf(`{"id":%q,"type":"invoice.paid","data":{}}`, ids[i]))
		}
		hasMore := len(page) > limit
		if hasMore {
			page = page[:limit]
		}
		fmt.Fprintf(w, `{"object":"list","data":[%s],"has_more":%t}`, strings.Join(page, ","), hasMore)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func withCatchup(t *testing.T, config, apiBase, interval string) string {
	t.Helper()
	raw, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	raw = fmt.Appendf(raw, "[source.catchup]\napi_key = \"${E2E_STRIPE_KEY}\"\ntypes = [\"invoice.paid\"]\napi_base = %q\ninterval = %q\nrate = 20\n", apiBase, interval)
	return writeTempFile(t, "ferry-catchup.toml", string(raw))
}

// appByEvent counts the app's requests per Ferry-Event-Id, and returns
// the Ferry-Origin header each came with.
func appByEvent(app *downstream) (count map[string]int, origin map[string]string) {
	app.mu.Lock()
	defer app.mu.Unlock()
	count, origin = map[string]int{}, map[string]string{}
	for _, r := range app.requests {
		count[r.Header.Get("Ferry-Event-Id")]++
		origin[r.Header.Get("Ferry-Event-Id")] = r.Header.Get("Ferry-Origin")
	}
	return count, origin
}

// checkAllOnce waits until every event is done, then checks the app got
// each exactly once and that exactly the never-delivered ones are marked
// as caught up.
func checkAllOnce(t *testing.T, st ferry.Store, app *downstream, ids []string, caughtUp map[string]bool) {
	t.Helper()
	waitFor(t, 60*time.Second, "all 50 events done", func() bool {
		for _, id := range ids {
			if ev := eventState(t, st, id); ev == nil || ev.State != ferry.StateDone {
				return false
			}
		}
		return true
	})
	got, origins := appByEvent(app)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("app received %s %d times, want once", id, got[id])
		}
		want := ferry.OriginDelivery
		if caughtUp[id] {
			want = ferry.OriginCatchup
		}
		if ev := eventState(t, st, id); ev.Origin != want {
			t.Errorf("%s origin %q, want %q", id, ev.Origin, want)
		}
		if caughtUp[id] != (origins[id] == "catchup") {
			t.Errorf("%s reached the app with Ferry-Origin %q", id, origins[id])
		}
	}
	if app.count() != len(ids) {
		t.Errorf("app received %d requests, want %d", app.count(), len(ids))
	}
}

func e2eEvents() (ids []string, caughtUp map[string]bool) {
	caughtUp = map[string]bool{}
	for i := range 50 {
		id := fmt.Sprintf("evt_e2e_%02d", i)
		ids = append(ids, id)
		if i%5 == 2 { // 10 the provider never delivered
			caughtUp[id] = true
		}
	}
	return ids, caughtUp
}

func TestReconcile(t *testing.T) {
	t.Setenv("E2E_STRIPE_KEY", stripeAPIKey)

	t.Run("ByHandCatchesUpTheTenNeverDelivered", func(t *testing.T) {
		pool, schema := pgtest.Schema(t)
		st := postgres.New(pool, nil)
		ids, caughtUp := e2eEvents()
		api := stripeAPI(t, ids, time.Now().Add(-time.Hour))
		app, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
		cfg := withCatchup(t, writeConfig(t, pgtest.ConnString(schema), appSrv.URL, ""), api.URL, "0")
		p := startServe(t, cfg)
		for _, id := range ids {
			if !caughtUp[id] {
				if code := sendStripe(t, p.addr, id); code != http.StatusOK {
					t.Fatalf("live delivery of %s answered %d", id, code)
				}
			}
		}
		waitFor(t, 60*time.Second, "40 live events forwarded", func() bool { return app.count() == 40 })

		out, errOut, code := runFerry(t, "reconcile", "--config", cfg, "--source", "stripe")
		if code != 0 {
			t.Fatalf("reconcile exit %d\n%s%s", code, out, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if last := lines[len(lines)-1]; last != "reconcile: source=stripe fetched=50 new=10 known=40 skipped=0" {
			t.Fatalf("last line %q\n%s", last, out)
		}
		if strings.Contains(out+errOut, stripeAPIKey) {
			t.Fatalf("the API key was printed:\n%s%s", out, errOut)
		}
		checkAllOnce(t, st, app, ids, caughtUp)

		// A second pass lists the overlap again and adds nothing.
		out, _, code = runFerry(t, "reconcile", "--config", cfg, "--source", "stripe", "--since", "24h")
		if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "fetched=50 new=0 known=50 skipped=0") {
			t.Fatalf("second reconcile exit %d:\n%s", code, out)
		}
		// Each event is done: forwarded again, it would have been claimed again.
		checkAllOnce(t, st, app, ids, caughtUp)

		out, _, code = runFerry(t, "reconcile", "--config", cfg, "--source", "stripe", "--since", "2h", "--dry-run", "--json")
		var res struct {
			Fetched, New, Known int
			DryRun              bool `json:"dry_run"`
			Advanced            bool
		}
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Fetched != 50 || res.Known != 50 || !res.DryRun || res.Advanced || !strings.Contains(out, `"failed": false`) {
			t.Fatalf("dry run --json: exit %d, %v, %+v\n%s", code, err, res, out)
		}
		// No window reaches past the source's retention (144h by default).
		out, _, code = runFerry(t, "reconcile", "--config", cfg, "--source", "stripe", "--since", "240h", "--dry-run", "--json")
		var cut struct{ Warnings []string }
		if err := json.Unmarshal([]byte(out), &cut); code != 0 || err != nil || !strings.Contains(strings.Join(cut.Warnings, "\n"), "retention 144h") {
			t.Fatalf("--since past retention: exit %d, %v, warnings %q", code, err, cut.Warnings)
		}
		if _, errOut, code := runFerry(t, "reconcile", "--config", cfg); code != 2 || !strings.Contains(errOut, "--source is required") {
			t.Fatalf("reconcile without --source: exit %d %s", code, errOut)
		}

		out, _, _ = runFerry(t, "events", "show", "--config", cfg, "stripe", "evt_e2e_02")
		if !strings.Contains(out, "catchup") {
			t.Errorf("events show does not say the event was caught up:\n%s", out)
		}
	})

	// A key the provider refuses fails every pass; the log says so each
	// interval, and the metric lets an alert say so once.
	t.Run("ServeLoopCountsFailedPasses", func(t *testing.T) {
		refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":{"message":"Invalid API Key provided"}}`, http.StatusUnauthorized)
		}))
		t.Cleanup(refusing.Close)
		_, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
		plain := writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), appSrv.URL, "")
		p := startServe(t, withCatchup(t, plain, refusing.URL, "15m"))
		var metrics string
		waitFor(t, 60*time.Second, "the failed pass counted", func() bool {
			_, metrics = testhttp.Get(t, "http://"+p.admin+"/metrics")
			return strings.Contains(metrics, `ferry_catchup_passes_total{outcome="failed",source="stripe"} 1`)
		})
		if !strings.Contains(metrics, `ferry_catchup_passes_total{outcome="ok",source="stripe"} 0`) {
			t.Errorf("a refused pass counted as ok:\n%s", metrics)
		}
	})

	// A failed pass prints no clean-looking summary, gives the checkpoint
	// the right reason, and names the key the provider refused.
	t.Run("RefusedKeyFailedPassSaysSo", func(t *testing.T) {
		refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":{"message":"Invalid API Key provided"}}`, http.StatusUnauthorized)
		}))
		t.Cleanup(refusing.Close)
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		cfg := withCatchup(t, writeConfig(t, "sqlite:"+dbPath, "http://127.0.0.1:9/app", ""), refusing.URL, "0")
		if _, errOut, code := runFerry(t, "migrate", "--config", cfg); code != 0 {
			t.Fatalf("migrate: exit %d %s", code, errOut)
		}
		out, errOut, code := runFerry(t, "reconcile", "--config", cfg, "--source", "stripe")
		if code != 1 || !strings.Contains(out, "checkpoint left: the pass failed\n") || strings.Contains(out, "did not reach back") ||
			!strings.Contains(out, "reconcile: source=stripe failed=true fetched=0 new=0 known=0 skipped=0\n") {
			t.Fatalf("refused pass: exit %d, want 1 and a summary saying the pass failed\n%s%s", code, out, errOut)
		}
		if !strings.Contains(errOut, "HTTP 401") || !strings.Contains(errOut, "refused source[0] (stripe).catchup.api_key") {
			t.Fatalf("refused pass: stderr does not name the key to fix:\n%s", errOut)
		}
		out, _, code = runFerry(t, "reconcile", "--config", cfg, "--source", "stripe", "--json")
		var res struct {
			Failed   bool `json:"failed"`
			Advanced bool `json:"advanced"`
		}
		if err := json.Unmarshal([]byte(out), &res); code != 1 || err != nil || !res.Failed || res.Advanced {
			t.Fatalf("refused pass --json: exit %d, %v, %+v, want 1 and failed=true\n%s", code, err, res, out)
		}
		// Every count is there at zero too, as in the text summary: a
		// script reads .skipped without a default.
		var counts map[string]any
		if err := json.Unmarshal([]byte(out), &counts); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"fetched", "new", "known", "skipped"} {
			if counts[key] != 0.0 {
				t.Errorf("refused pass --json: %s = %v, want 0\n%s", key, counts[key], out)
			}
		}
		// A pass that fails before its window (a checkpoint it cannot
		// read) still prints its JSON.
		st, err := sqlite.Open(dbPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CheckpointPut(context.Background(), &ferry.CheckpointPutParams{Name: catchup.CheckpointName("stripe"), Value: "not a time"}); err != nil {
			t.Fatal(err)
		}
		st.Close()
		out, _, code = runFerry(t, "reconcile", "--config", cfg, "--source", "stripe", "--json")
		res.Failed = false
		if err := json.Unmarshal([]byte(out), &res); code != 1 || err != nil || !res.Failed {
			t.Fatalf("pass failed before its window --json: exit %d, %v, %+v, want 1 and failed=true\n%s", code, err, res, out)
		}
	})

	t.Run("ServeLoopCatchesUpAfterAnOutage", func(t *testing.T) {
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		ids, caughtUp := e2eEvents()
		api := stripeAPI(t, ids, time.Now().Add(-time.Hour))
		app, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
		plain := writeConfig(t, "sqlite:"+dbPath, appSrv.URL, "")

		// Before: 40 delivered live to a ferry without catch-up.
		first := startServe(t, plain)
		for _, id := range ids {
			if !caughtUp[id] {
				if code := sendStripe(t, first.addr, id); code != http.StatusOK {
					t.Fatalf("live delivery of %s answered %d", id, code)
				}
			}
		}
		st := teststore.OpenSQLite(t, dbPath, nil)
		waitFor(t, 60*time.Second, "40 live events done", func() bool {
			list, err := st.EventList(context.Background(), &ferry.EventListParams{States: []ferry.State{ferry.StateDone}})
			return err == nil && len(list.Events) == 40
		})
		// A graceful stop records the last verdicts (a SIGKILL could lose the
		// last "done", and that event would rightly run again).
		_ = first.cmd.Process.Signal(syscall.SIGTERM)
		<-first.exited

		// After: the loop's first pass runs at start.
		p := startServe(t, withCatchup(t, plain, api.URL, "15m"))
		checkAllOnce(t, st, app, ids, caughtUp)
		if _, err := st.CheckpointGet(context.Background(), &ferry.CheckpointGetParams{Name: "catchup:stripe"}); err != nil {
			t.Errorf("no checkpoint after the loop's pass: %v", err)
		}
		var metrics string
		waitFor(t, 60*time.Second, "the pass counted", func() bool {
			_, metrics = testhttp.Get(t, "http://"+p.admin+"/metrics")
			return strings.Contains(metrics, `ferry_catchup_passes_total{outcome="ok",source="stripe"} 1`)
		})
		for _, want := range []string{
			`ferry_catchup_events_total{outcome="new",source="stripe"} 10`,
			`ferry_catchup_events_total{outcome="known",source="stripe"} 40`,
			`ferry_catchup_passes_total{outcome="failed",source="stripe"} 0`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		if strings.Contains(p.log(), stripeAPIKey) {
			t.Errorf("the API key is in serve's log")
		}
	})

	// A first pass, with no checkpoint, starts at the source's lookback,
	// not the default 72h: serve's loop builds the same runner.
	t.Run("FirstPassStartsAtTheLookback", func(t *testing.T) {
		api := stripeAPI(t, nil, time.Now())
		cfg := withCatchup(t, writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), "http://127.0.0.1:9/app", ""), api.URL, "0")
		writeFile(t, cfg, readFile(t, cfg)+"lookback = \"24h\"\n") // [source.catchup] is the last table
		if _, errOut, code := runFerry(t, "migrate", "--config", cfg); code != 0 {
			t.Fatalf("migrate: exit %d %s", code, errOut)
		}
		before := time.Now().Truncate(time.Second)
		out, errOut, code := runFerry(t, "reconcile", "--config", cfg, "--source", "stripe", "--dry-run", "--json")
		after := time.Now()
		var res struct{ From time.Time }
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil {
			t.Fatalf("reconcile: exit %d, %v\n%s%s", code, err, out, errOut)
		}
		if from := res.From; from.Before(before.Add(-24*time.Hour)) || from.After(after.Add(-24*time.Hour)) {
			t.Fatalf("first pass from %s, want 24h before the run (%s to %s)", from, before, after)
		}
	})

	// Stripe lists the whole account's events: without types, catch-up
	// would send the app every type of every endpoint, so ferry refuses.
	t.Run("StripeWithoutTypesStopsTheStart", func(t *testing.T) {
		raw, err := os.ReadFile(writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), "http://127.0.0.1:9/app", ""))
		if err != nil {
			t.Fatal(err)
		}
		// The start stops before any call: the API is never reached.
		raw = fmt.Appendf(raw, "[source.catchup]\napi_key = \"${E2E_STRIPE_KEY}\"\napi_base = %q\n", "http://127.0.0.1:9")
		cfg := writeTempFile(t, "ferry-catchup.toml", string(raw))
		_, errOut, code := runFerry(t, "reconcile", "--config", cfg, "--source", "stripe")
		if code != 2 || !strings.Contains(errOut, "source[0] (stripe).catchup.types: missing") || !strings.Contains(errOut, "enabled_events") {
			t.Fatalf("reconcile without types: exit %d, want 2 naming catchup.types\n%s", code, errOut)
		}
	})
}

// Catch-up holds a source to the receiver's max_body: what the door would
// refuse with 413, catch-up does not store.
func TestCatchupRunnerTakesMaxBody(t *testing.T) {
	t.Setenv("E2E_STRIPE_KEY", stripeAPIKey)
	for name, tc := range map[string]struct {
		key  string
		want int64
	}{
		"Configured": {"max_body = 2048\n", 2048},
		"Default":    {"", ferryhttp.DefaultMaxBodyBytes},
	} {
		t.Run(name, func(t *testing.T) {
			path := writeServeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), fmt.Sprintf(`
[[source]]
name = "stripe"
provider = "stripe"
secrets = [%q]
%s[source.catchup]
api_key = "${E2E_STRIPE_KEY}"
types = ["*"]
`, stripeSecret, tc.key))
			cfg, err := loadConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			r, err := newCatchupRunner(cfg, "stripe", nil, slog.Default(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.MaxBody != tc.want {
				t.Fatalf("runner MaxBody = %d, want %d", r.MaxBody, tc.want)
			}
		})
	}
}

// A 401 or 403 from the provider's API names the key to fix; a rate limit
// (a 403 that asked to wait) is no refused key, nor is an answer that is
// not JSON (a proxy's page). GitHub answers 404 in its own JSON for a
// wrong hook id or installation_id and to a token that may not see the
// hook: the hook and the token are named; a 404 that is not JSON, or
// Stripe's, is not.
func TestReconcileNamesARefusedKey(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(writeServeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), `
[[source]]
name = "gh"
provider = "github"
secrets = ["gh_secret"]
[source.catchup]
token = "ghp_x"
hook = "repos/o/r/hooks/1"
[[source]]
name = "st"
provider = "stripe"
secrets = ["whsec_x"]
[source.catchup]
api_key = "sk_x"
types = ["*"]
`))
	if err != nil {
		t.Fatal(err)
	}
	const (
		token = "refused source[0] (gh).catchup.token"
		hook  = "check source[0] (gh).catchup.hook and source[0] (gh).catchup.token"
	)
	for _, tc := range []struct {
		source string
		err    *catchup.StatusError
		want   string // "" names nothing
	}{
		{"gh", &catchup.StatusError{Status: http.StatusUnauthorized}, token},
		{"gh", &catchup.StatusError{Status: http.StatusForbidden}, token},
		{"gh", &catchup.StatusError{Status: http.StatusForbidden, RateLimited: true}, ""},
		// A proxy's sign-in page is no verdict on the token.
		{"gh", &catchup.StatusError{Status: http.StatusUnauthorized, NotJSON: true, ContentType: "text/html"}, ""},
		{"gh", &catchup.StatusError{Status: http.StatusForbidden, NotJSON: true, ContentType: "text/html"}, ""},
		{"gh", &catchup.StatusError{Status: http.StatusTooManyRequests, RateLimited: true}, ""},
		{"gh", &catchup.StatusError{Status: http.StatusNotFound, Body: `{"message":"Not Found"}`}, hook},
		{"gh", &catchup.StatusError{Status: http.StatusNotFound, NotJSON: true, ContentType: "text/html"}, ""},
		{"st", &catchup.StatusError{Status: http.StatusNotFound}, ""},
	} {
		got := nameRefusedKey(cfg, tc.source, fmt.Errorf("pass: %w", tc.err)).Error()
		for _, key := range []string{token, hook} {
			if named := strings.Contains(got, key); named != (key == tc.want) {
				t.Errorf("%s HTTP %d, rate limited %v, not JSON %v: %q; want %q named: %v", tc.source, tc.err.Status, tc.err.RateLimited, tc.err.NotJSON, got, key, key == tc.want)
			}
		}
	}
	// One delivery's fetch refused, in a pass that listed the hook with
	// the token: neither is to blame.
	refused := fmt.Errorf("pass: get delivery 7: %w: %w", catchup.ErrRefusedForNow, &catchup.StatusError{Status: http.StatusNotFound, Body: `{"message":"Not Found"}`})
	if got := nameRefusedKey(cfg, "gh", refused).Error(); strings.Contains(got, "catchup.hook") || strings.Contains(got, "catchup.token") {
		t.Errorf("one delivery refused for now: %q; want no setting named", got)
	}
}
