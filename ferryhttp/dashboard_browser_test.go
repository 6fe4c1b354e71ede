package ferryhttp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// TestDashboardBrowser drives Debian's Chromium through the dashboard as an
// operator would: filter to dead events, open one, replay it, and watch a
// real worker finish it. It saves a screenshot of the final page as a test
// artifact (go test -artifacts).
func TestDashboardBrowser(t *testing.T) {
	t.Parallel()
	needChromium(t)
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})

	client, err := ferry.NewClient(&ferry.Config{
		Store: b.store, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	client.Handle("stripe", func(context.Context, *ferry.Delivery) error { return nil })
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Stop(context.Background()) })

	ctx := newBrowser(t)

	err = chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/ui/"),
		chromedp.WaitVisible(`#at-risk`),
		chromedp.SetValue(`#filter-state`, "dead"),
		chromedp.Click(`#filter-apply`),
		// Only the filtered page has the attribute: the old page must not
		// satisfy the wait before the navigation lands.
		chromedp.WaitReady(`#filter-state option[value="dead"][selected]`),
		chromedp.WaitVisible(`#event-table a.event-link`),
	)
	if err != nil {
		t.Fatalf("filter to dead: %v", err)
	}
	table, err := eventTable(ctx)
	if err != nil {
		t.Fatalf("filter to dead: %v", err)
	}
	if !strings.Contains(table, "evt_dead") || strings.Contains(table, "evt_old") || strings.Contains(table, "gh_1") {
		t.Fatalf("the dead filter shows:\n%s", table)
	}

	followLink(t, ctx, "#event-table a.event-link", "#replay", "open the dead event")
	err = chromedp.Do(ctx,
		chromedp.WaitVisible(`#event-state [data-state="dead"]`),
		chromedp.Click(`#replay-box`),
		chromedp.Click(`#replay`),
		chromedp.WaitVisible(`#flash`),
	)
	if err != nil {
		t.Fatalf("open and replay: %v", err)
	}
	flash, err := chromedp.Run(ctx, chromedp.Text(`#flash`))
	if err != nil {
		t.Fatalf("open and replay: %v", err)
	}
	if !strings.Contains(flash, "replayed") {
		t.Fatalf("flash after replay = %q", flash)
	}

	// The worker takes the replayed event; reload until the page says done.
	for done := false; !done; {
		if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(`#event-state`)); err != nil {
			t.Fatalf("waiting for done: %v", err)
		}
		done, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#event-state [data-state="done"]') !== null`))
		if err != nil {
			t.Fatalf("waiting for done: %v", err)
		}
		if !done {
			time.Sleep(100 * time.Millisecond)
		}
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100) /* 100 means PNG */)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), "dashboard-event-done.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestDashboardBrowserLogin signs in with the token through the form in a
// real browser (so the session cookie's attributes are the browser's to
// honour), checks the page names the actor, signs out, and is sent back to
// the login.
func TestDashboardBrowserLogin(t *testing.T) {
	t.Parallel()
	needChromium(t)
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{Token: "br0wser-token", TokenName: "oncall"})
	ctx := newBrowser(t)

	err := chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/ui/events/"+itoa(b.ids["evt_dead"])),
		chromedp.WaitVisible(`#login-token`),
	)
	url, _ := chromedp.Run(ctx, chromedp.Location())
	if err != nil || !strings.HasSuffix(url, "/ui/login") {
		t.Fatalf("anonymous event page: at %q, err %v; want the login", url, err)
	}
	err = chromedp.Do(ctx,
		chromedp.SendKeys(`#login-token`, "br0wser-token"),
		chromedp.Click(`#login-submit`),
		chromedp.WaitVisible(`#at-risk`),
	)
	if err != nil {
		t.Fatalf("sign in: %v", err)
	}
	actor, err := chromedp.Run(ctx, chromedp.Text(`#actor`))
	if err != nil || actor != "oncall" {
		t.Fatalf("signed in as %q (%v), want oncall", actor, err)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(`#sign-out`),
		chromedp.WaitVisible(`#login-token`),
		chromedp.Navigate(b.server.URL+"/ui/"),
		chromedp.WaitVisible(`#login-token`),
	)
	url, _ = chromedp.Run(ctx, chromedp.Location())
	if err != nil || !strings.HasSuffix(url, "/ui/login") {
		t.Fatalf("after sign out /ui/ is at %q (%v), want the login", url, err)
	}
}

// TestDashboardBrowserOperations drives the on-call features in Chromium:
// a filter (state, source and type), a bulk replay of what it selects
// through its counted confirmation, "retry now" on an event in backoff, and
// the overview refreshing itself (no reload) when a delivery arrives, and
// not while the operator is typing in a filter. A real worker forwards to
// a real app, so the replayed and retried events end done. With
// FERRY_SCREENSHOTS=dir it writes the overview and an event page there
// (docs/img holds the committed ones).
func TestDashboardBrowserOperations(t *testing.T) {
	t.Parallel()
	needChromium(t)
	b := setupDashboard(t, ferryhttp.DashboardOptions{Refresh: 250 * time.Millisecond}, ferryhttp.AdminOptions{})
	ctx := context.Background()

	// The app: a maintenance window for ord_wait, then fine.
	var maintenance atomic.Bool
	maintenance.Store(true)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ferry-Event-Id") == "ord_wait" && maintenance.Load() {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"maintenance until 18:00 UTC"}`)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(app.Close)
	fwd, err := ferryhttp.NewForwarder(ferryhttp.ForwarderOptions{URL: app.URL})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	receive := func(id, typ, payload string) {
		t.Helper()
		res, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "shop", EventID: id, Type: typ, Payload: []byte(payload),
			Headers: http.Header{"Content-Type": {"application/json"}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = res.ID
	}
	// Three dead orders (two paid, one refunded), as a broken deploy leaves them.
	for _, o := range []struct{ id, typ string }{{"ord_1", "order.paid"}, {"ord_2", "order.paid"}, {"ord_3", "order.refunded"}} {
		receive(o.id, o.typ, `{"id":"`+o.id+`","amount":4200}`)
		claims, err := b.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "old-deploy", Limit: 1, TTL: time.Minute, Sources: []string{"shop"}})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim %s: %v", o.id, err)
		}
		if _, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: claims[0].Event.Lease(), Error: "forward: app answered 404 Not Found", Dead: true,
			Response: ferry.NewAttemptResponse(404, []byte(`{"error":"no route /webhooks/shop"}`))}); err != nil {
			t.Fatal(err)
		}
	}
	receive("ord_wait", "order.paid", `{"id":"ord_wait","amount":990,"currency":"eur"}`)
	// The provider sent ord_wait again with other bytes: a conflict.
	if _, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "shop", EventID: "ord_wait", Type: "order.paid",
		Payload: []byte(`{"id":"ord_wait","amount":1990,"currency":"eur"}`)}); err != nil {
		t.Fatal(err)
	}

	forward(t, b.store, fwd, 50*time.Millisecond)
	// ord_wait's first attempt meets the maintenance: pending, an hour away.
	waitFor(t, b, ids["ord_wait"], func(e *ferry.Event) bool { return e.State == ferry.StatePending && e.Attempt == 1 })

	br := newBrowser(t)
	state := func(id string) ferry.State {
		e, err := b.store.EventGet(ctx, &ferry.EventGetParams{ID: ids[id]})
		if err != nil {
			t.Fatal(err)
		}
		return e.State
	}

	// A filter: dead order.paid events of shop.
	err = chromedp.Do(br,
		chromedp.Navigate(b.server.URL+"/ui/"),
		chromedp.WaitVisible(`#at-risk`),
		chromedp.SetValue(`#filter-state`, "dead"),
		chromedp.SetValue(`#filter-source`, "shop"),
		chromedp.SetValue(`#filter-type`, "order.paid"),
		chromedp.Click(`#filter-apply`),
		chromedp.WaitReady(`#filter-type[value="order.paid"]`),
		chromedp.WaitVisible(`#replay-filter`), // after the list: the list is whole
	)
	if err != nil {
		t.Fatalf("filter: %v", err)
	}
	table, err := eventTable(br)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "ord_1") || !strings.Contains(table, "ord_2") || strings.Contains(table, "ord_3") || strings.Contains(table, "evt_dead") || strings.Contains(table, "ord_wait") {
		t.Fatalf("the filter shows:\n%s", table)
	}

	// Bulk replay of what it selects: the confirmation counts, changes
	// nothing; confirming replays those two and nothing else.
	followLink(t, br, `#replay-filter`, `#replay-count`, "open the replay confirmation")
	count, err := chromedp.Run(br, chromedp.Text(`#replay-count`))
	if err != nil || !strings.Contains(count, "2 events match") {
		t.Fatalf("confirmation says %q (%v), want 2 events", count, err)
	}
	if state("ord_1") != ferry.StateDead || state("ord_2") != ferry.StateDead {
		t.Fatal("the confirmation page replayed before the confirmation")
	}
	clickForFlash(t, br, `#replay-confirm`, "confirm the replay", "replayed 2 events")
	waitState(t, b, ids["ord_1"], ferry.StateDone)
	waitState(t, b, ids["ord_2"], ferry.StateDone)
	if state("ord_3") != ferry.StateDead {
		t.Errorf("ord_3 (order.refunded) was replayed: %s", state("ord_3"))
	}

	// Mark resolved: ord_3's refund was made by hand, so the operator ticks
	// the box that says so and closes it without running it; it is done at
	// once, and the page says who.
	err = chromedp.Do(br,
		chromedp.Navigate(b.server.URL+"/ui/events/"+itoa(ids["ord_3"])),
		chromedp.WaitVisible(`#resolve`),
	)
	if err != nil {
		t.Fatalf("open ord_3: %v", err)
	}
	const submittable = `document.getElementById("resolve-confirm").form.checkValidity()`
	if ok, err := chromedp.Run(br, chromedp.Evaluate[bool](submittable)); err != nil || ok {
		t.Fatalf("the resolve form submits without its box ticked (%v)", err)
	}
	if err := chromedp.Do(br, chromedp.Click(`#resolve-confirm`)); err != nil {
		t.Fatalf("tick the box: %v", err)
	}
	clickForFlash(t, br, `#resolve`, "mark resolved", "resolved: the event is done")
	if got := state("ord_3"); got != ferry.StateDone {
		t.Errorf("ord_3 after mark resolved: %s, want done", got)
	}
	if actions, err := chromedp.Run(br, chromedp.Text(`#actions`)); err != nil || !strings.Contains(actions, "resolve") || !strings.Contains(actions, "anonymous") {
		t.Errorf("ord_3's actions after mark resolved = %q (%v), want a resolve by anonymous", actions, err)
	}
	if n := len(attemptsOf(t, b, ids["ord_3"])); n != 1 {
		t.Errorf("ord_3 has %d attempts after mark resolved, want its 1: resolving runs nothing", n)
	}

	// Retry now: ord_wait waits an hour for its next attempt; the app is
	// back, so an operator makes it due, and the worker finishes it.
	maintenance.Store(false)
	err = chromedp.Do(br,
		chromedp.Navigate(b.server.URL+"/ui/events/"+itoa(ids["ord_wait"])),
		chromedp.WaitVisible(`#retry-now`),
		chromedp.WaitVisible(`#conflict-0`),
	)
	if err != nil {
		t.Fatalf("open ord_wait: %v", err)
	}
	screenshot(t, br, "event.png")
	clickForFlash(t, br, `#retry-now`, "retry now", "due now")
	waitState(t, b, ids["ord_wait"], ferry.StateDone)

	// The overview refreshes itself when a delivery arrives: no reload
	// (the page's own marker survives), the new row appears.
	err = chromedp.Do(br,
		chromedp.Navigate(b.server.URL+"/ui/"),
		chromedp.WaitVisible(`#event-table`),
		chromedp.Evaluate[chromedp.Void](`window.ferryTestMarker = "same page"`),
	)
	if err != nil {
		t.Fatalf("overview: %v", err)
	}
	receive("ord_live", "order.paid", `{"id":"ord_live"}`)
	_, err = chromedp.Run(br, chromedp.Poll[bool](`[...document.querySelectorAll("#event-table a.event-link")].some(a => a.textContent === "ord_live")`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		status, _ := chromedp.Run(br, chromedp.Evaluate[string](`document.getElementById("live-status").textContent + " ticks=" + document.body.dataset.ticks + " paused=" + document.body.dataset.paused`))
		t.Fatalf("the overview did not show the new delivery by itself: %v (status %q)", err, status)
	}
	if marker, _ := chromedp.Run(br, chromedp.Evaluate[string](`String(window.ferryTestMarker)`)); marker != "same page" {
		t.Fatalf("the overview reloaded instead of refreshing (marker %q)", marker)
	}
	// Done: ord_1, ord_2 (replayed), ord_3 (resolved), ord_wait and ord_live.
	waitState(t, b, ids["ord_live"], ferry.StateDone)
	_, err = chromedp.Run(br, chromedp.Poll[bool](`document.querySelector("#counts [data-count='shop/done']").textContent === "5"`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		t.Fatalf("the counts did not refresh: %v", err)
	}
	screenshot(t, br, "overview.png")

	// Typing in a filter pauses the refresh: a delivery that arrives
	// meanwhile shows only once the edit is dropped.
	err = chromedp.Do(br, chromedp.Focus(`#filter-q`), chromedp.SendKeys(`#filter-q`, "ord"))
	if err != nil {
		t.Fatal(err)
	}
	pausedAt, err := chromedp.Run(br, chromedp.Poll[int](`+(document.body.dataset.paused || 0) >= 1 && +document.body.dataset.paused`,
		chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil {
		t.Fatalf("the refresh did not pause while typing: %v", err)
	}
	receive("ord_typed", "order.paid", `{"id":"ord_typed"}`)
	// Two more paused ticks after the delivery: no refresh ran since.
	_, err = chromedp.Run(br, chromedp.Poll[bool](fmt.Sprintf(`+document.body.dataset.paused >= %d`, pausedAt+2),
		chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	if shown, _ := chromedp.Run(br, chromedp.Evaluate[bool](`document.querySelector("#event-table").textContent.includes("ord_typed")`)); shown {
		t.Fatal("the table refreshed while the operator was typing in the filter")
	}
	err = chromedp.Do(br, chromedp.Evaluate[chromedp.Void](`(q => { q.value = ""; q.blur(); })(document.getElementById("filter-q"))`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = chromedp.Run(br, chromedp.Poll[bool](`document.querySelector("#event-table").textContent.includes("ord_typed")`,
		chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		t.Fatalf("the refresh did not resume after the edit: %v", err)
	}
}

// attemptsOf reads an event's attempt ledger from the store.
func attemptsOf(t *testing.T, b *dashBundle, id int64) []*ferry.Attempt {
	t.Helper()
	list, err := b.store.AttemptList(context.Background(), &ferry.AttemptListParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// waitFor reads the store until the event satisfies ok; a generous
// ceiling only a bug reaches.
func waitFor(t *testing.T, b *dashBundle, id int64, ok func(*ferry.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		e, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{ID: id})
		if err == nil && ok(e) {
			return
		}
		if err != nil {
			e = &ferry.Event{}
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %d is %s at attempt %d, next at %v (%v)", id, e.State, e.Attempt, e.NextAttemptAt, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// followLink clicks the link sel until the page it leads to shows
// arrived, three tries of 15 s at most. The overview swaps its event list
// in every refresh: a swap between the mouse's press and release loses the
// click, as it would a person's, who clicks again.
func followLink(t *testing.T, br context.Context, sel, arrived, what string) {
	t.Helper()
	var err error
	for range 3 {
		try, cancel := context.WithTimeout(br, 15*time.Second)
		err = chromedp.Do(try, chromedp.Click(sel), chromedp.WaitVisible(arrived))
		cancel()
		if err == nil {
			return
		}
		here, _ := chromedp.Run(br, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q) !== null`, arrived)))
		if here {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

// eventTable reads the event list's rows in one step in the page. The
// overview swaps in a fresh list on every refresh: chromedp.Text, which
// finds the node first and reads it later, reads "" from a list swapped
// out between the two.
func eventTable(br context.Context) (string, error) {
	return chromedp.Run(br, chromedp.Evaluate[string](`document.querySelector("#event-table tbody").innerText`))
}

// clickForFlash clicks sel (doing what), waits for the flash message and
// checks that it says want.
func clickForFlash(t *testing.T, br context.Context, sel, what, want string) {
	t.Helper()
	if err := chromedp.Do(br, chromedp.Click(sel), chromedp.WaitVisible(`#flash`)); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if flash, _ := chromedp.Run(br, chromedp.Text(`#flash`)); !strings.Contains(flash, want) {
		t.Fatalf("flash after %s = %q, want %q in it", what, flash, want)
	}
}

// screenshot saves the page as a test artifact, and into
// $FERRY_SCREENSHOTS when set (make screenshots: docs/img).
func screenshot(t *testing.T, br context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(br, chromedp.FullScreenshot(100) /* 100 means PNG */)
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{t.ArtifactDir()}
	if dir := os.Getenv("FERRY_SCREENSHOTS"); dir != "" {
		dirs = append(dirs, dir)
	}
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", filepath.Join(dir, name))
	}
}

// needChromium skips without Debian's Chromium, except in CI, which must
// have it.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing; CI must install it: apt-get update && apt-get install -y chromium", chromiumPath)
		}
		t.Skipf("%s is missing; install it with: apt-get update && apt-get install -y chromium", chromiumPath)
	}
}

// newBrowser starts a headless Chromium for one test.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	// A ceiling only a hung browser reaches, above the steps' own (waitFor,
	// followLink), and before the test binary's deadline so t reports it.
	ceiling := 5 * time.Minute
	if d, ok := t.Deadline(); ok {
		ceiling = min(ceiling, time.Until(d)-30*time.Second)
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, ceiling)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}
