package ferryhttp_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing; CI must install it: apt-get update && apt-get install -y chromium", chromiumPath)
		}
		t.Skipf("%s is missing; install it with: apt-get update && apt-get install -y chromium", chromiumPath)
	}
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
	table, err := chromedp.Run(ctx, chromedp.Text(`#event-table tbody`))
	if err != nil {
		t.Fatalf("filter to dead: %v", err)
	}
	if !strings.Contains(table, "evt_dead") || strings.Contains(table, "evt_old") || strings.Contains(table, "gh_1") {
		t.Fatalf("the dead filter shows:\n%s", table)
	}

	err = chromedp.Do(ctx,
		chromedp.Click(`#event-table a.event-link`),
		chromedp.WaitVisible(`#replay`),
		chromedp.WaitVisible(`#event-state [data-state="dead"]`),
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
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing; CI must install it: apt-get update && apt-get install -y chromium", chromiumPath)
		}
		t.Skipf("%s is missing; install it with: apt-get update && apt-get install -y chromium", chromiumPath)
	}
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
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second) // a hung browser must not hang the run
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}
