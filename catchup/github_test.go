package catchup

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/provider"
)

// githubSent are the headers GitHub sends with a delivery, but its
// signatures and content type, as its deliveries API lists them.
func githubSent(guid, event string) map[string]string {
	return map[string]string{
		"Accept": "*/*", "User-Agent": "GitHub-Hookshot/a1b2c3d",
		"X-GitHub-Event": event, "X-GitHub-Delivery": guid, "X-GitHub-Hook-ID": "42",
		"X-GitHub-Hook-Installation-Target-ID": "7", "X-GitHub-Hook-Installation-Target-Type": "repository",
	}
}

// fakeGitHub serves a hook's deliveries, newest first, paged by a cursor
// in the Link header, and each delivery by id.
type fakeGitHub struct {
	t        *testing.T
	hook     string
	auth     func(r *http.Request) bool
	mu       sync.Mutex
	attempts []ghAttempt        // oldest first
	requests requestLog[string] // path and query
	// onFetch, when set, runs before a delivery is answered.
	onFetch func(guid string)
	// nextHost, when set, is the host the Link header points to.
	nextHost string
	// form, when set, is a hook that delivers form-encoded bodies: its
	// deliveries' request headers say so.
	form bool
	// repeatNext, when set, has every Link point to the first page: a
	// cache or proxy that drops the cursor.
	repeatNext bool
	// limit, when set, may answer a request itself (a rate limit, an
	// error): it reports whether it did.
	limit func(w http.ResponseWriter, r *http.Request) bool
	// date, when set, is the provider's clock its answers' Date header
	// gives; setupGitHub sets the runner's.
	date func() time.Time
}

type ghAttempt struct {
	ID         int64
	GUID       string
	At         time.Time
	Status     int
	Event      string
	Redelivery bool
}

// refuseFetch has the fake answer status, with a message as GitHub's, to
// every fetch of delivery id.
func (f *fakeGitHub) refuseFetch(id string, status int) {
	f.limit = func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/deliveries/"+id) {
			return false
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"message":%q}`, http.StatusText(status))
		return true
	}
}

// add records an event's delivery, answered statuses[0], and a
// redelivery for each later status, a minute apart. GitHub does not retry
// a failed delivery on its own: it tries again only when asked (the API or
// the UI), and each redelivery is a delivery of its own, with a later id,
// the same GUID and redelivery true. (Ids follow the order added, so a
// redelivery's id is below the next event's even when it is later.)
func (f *fakeGitHub) add(guid, event string, at time.Time, statuses ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range statuses {
		f.attempts = append(f.attempts, ghAttempt{ID: int64(len(f.attempts) + 1), GUID: guid, At: at.Add(time.Duration(i) * time.Minute), Status: s, Event: event, Redelivery: i > 0})
	}
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.record(r.URL.RequestURI())
	f.mu.Lock()
	attempts := slices.Clone(f.attempts)
	f.mu.Unlock()
	setDate(w, f.date)
	if f.limit != nil && f.limit(w, r) {
		return
	}
	if !f.auth(r) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"message":"Bad credentials: %s"}`, r.Header.Get("Authorization"))
		return
	}
	prefix := "/" + f.hook + "/deliveries"
	switch {
	case r.URL.Path == prefix:
		slices.SortFunc(attempts, func(a, b ghAttempt) int { return int(b.ID - a.ID) }) // newest first
		perPage, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
		if perPage == 0 {
			perPage = 30
		}
		start := 0
		if c := r.URL.Query().Get("cursor"); c != "" {
			start, _ = strconv.Atoi(c)
		}
		end := min(start+perPage, len(attempts))
		if end < len(attempts) {
			host := "http://" + r.Host
			if f.nextHost != "" {
				host = f.nextHost
			}
			next := end
			if f.repeatNext {
				next = 0
			}
			w.Header().Set("Link", fmt.Sprintf(`<%s%s?per_page=%d&cursor=%d>; rel="next"`, host, prefix, perPage, next))
		}
		page := []map[string]any{}
		for _, a := range attempts[start:end] {
			var at any // null for a zero At
			if !a.At.IsZero() {
				at = a.At.Format(time.RFC3339)
			}
			page = append(page, map[string]any{
				"id": a.ID, "guid": a.GUID, "delivered_at": at, "status_code": a.Status,
				"status": http.StatusText(a.Status), "event": a.Event, "redelivery": a.Redelivery,
			})
		}
		_ = json.NewEncoder(w).Encode(page)
	case strings.HasPrefix(r.URL.Path, prefix+"/"):
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, prefix+"/"), 10, 64)
		i := slices.IndexFunc(attempts, func(a ghAttempt) bool { return a.ID == id })
		if i < 0 {
			http.NotFound(w, r)
			return
		}
		a := attempts[i]
		if f.onFetch != nil {
			f.onFetch(a.GUID)
		}
		contentType := "application/json"
		if f.form {
			contentType = "application/x-www-form-urlencoded"
		}
		headers := githubSent(a.GUID, a.Event)
		headers["Content-Type"] = contentType
		headers["X-Hub-Signature"], headers["X-Hub-Signature-256"] = "sha1=deadbeef", "sha256=deadbeef"
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": a.ID, "guid": a.GUID, "event": a.Event,
			"request": map[string]any{
				"headers": headers,
				"payload": map[string]any{"action": "opened", "guid": a.GUID},
			},
		})
	default:
		http.NotFound(w, r)
	}
}

type githubBundle struct {
	runBundle
	fake *fakeGitHub
	srv  *httptest.Server
}

const githubToken = "ghp_SECRETtoken0123456789abcdef"

func setupGitHub(t *testing.T, opts GitHubOptions) *githubBundle {
	t.Helper()
	b := &githubBundle{runBundle: newRunBundle(t)}
	b.fake = &fakeGitHub{t: t, hook: "repos/acme/shop/hooks/42", auth: func(r *http.Request) bool {
		return r.Header.Get("Authorization") == "Bearer "+githubToken
	}}
	b.fake.date = func() time.Time { return b.now }
	b.srv = httptest.NewServer(b.fake)
	t.Cleanup(b.srv.Close)
	if opts.Hook == "" {
		opts.Hook = b.fake.hook
	}
	if opts.Token == "" && opts.AppID == "" {
		opts.Token = githubToken
	}
	opts.APIBase = b.srv.URL
	opts.Rate = 1000
	if opts.Now == nil {
		opts.Now = func() time.Time { return b.now } // the host's clock agrees with GitHub's
	}
	r, err := NewGitHub(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.client.backoff = time.Millisecond
	b.start("github", r, slog.LevelInfo)
	return b
}

// delivered stores ids as the receiver would have from GitHub's live
// deliveries.
func (b *githubBundle) delivered(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := b.store.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "github", EventID: id, Type: "push", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGitHub(t *testing.T) {
	t.Parallel()

	// GitHub answers its rate limits with 403 or 429: with Retry-After, or
	// with X-RateLimit-Remaining 0 and the reset time. The client waits
	// and tries again; any other 403 fails at once.
	// The reset is on GitHub's clock, which its Date header shows: skew
	// is how far it runs ahead of the host's.
	resetIn := func(d, skew time.Duration) func(h http.Header) time.Time {
		return func(h http.Header) time.Time {
			now := time.Now()
			reset := now.Add(skew + d).Unix()
			h.Set("Date", now.Add(skew).UTC().Format(http.TimeFormat))
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
			return time.Unix(reset, 0).Add(-skew)
		}
	}
	for name, tc := range map[string]struct {
		status  int
		limited func(h http.Header) (until time.Time)
	}{
		"RateLimit403WithRetryAfterIsRetried": {http.StatusForbidden, func(h http.Header) time.Time {
			h.Set("Retry-After", "1")
			return time.Now().Add(time.Second)
		}},
		"RateLimit403AtZeroRemainingWaitsForTheReset": {http.StatusForbidden, resetIn(time.Second, 0)},
		// Past the backoff's first waits: a retry before the reset
		// would be refused again and count against the limit.
		"RateLimit429AtZeroRemainingWaitsForTheReset": {http.StatusTooManyRequests, resetIn(4*time.Second, 0)},
		// Read on the host's clock, an hour behind, the reset would be
		// an hour off, past what a pass waits; on GitHub's, a second.
		"RateLimitResetIsOnGitHubsClock": {http.StatusForbidden, resetIn(time.Second, time.Hour)},
		// A 5xx may be a gateway's, its Date no clock of GitHub's: its
		// Retry-After is read on the host's.
		"ServerErrorsDateIsNotGitHubsClock": {http.StatusServiceUnavailable, func(h http.Header) time.Time {
			until := time.Unix(time.Now().Add(time.Second).Unix(), 0)
			h.Set("Date", time.Unix(0, 0).UTC().Format(http.TimeFormat))
			h.Set("Retry-After", until.UTC().Format(http.TimeFormat))
			return until
		}},
		"Other403FailsAtOnce": {http.StatusForbidden, nil},
	} {
		limited := tc.limited
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupGitHub(t, GitHubOptions{})
			b.fake.add("failed-1", "push", base.Add(-time.Hour), 500)
			var (
				mu             sync.Mutex
				answered       bool
				until, retried time.Time // the wait asked for; the next request
			)
			b.fake.limit = func(w http.ResponseWriter, _ *http.Request) bool {
				mu.Lock()
				defer mu.Unlock()
				if answered {
					if retried.IsZero() {
						retried = time.Now()
					}
					return false
				}
				answered = true
				if limited != nil {
					until = limited(w.Header())
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, `{"message":"API rate limit exceeded"}`)
				return true
			}
			res, err := b.runner.Pass(context.Background(), PassOptions{})
			requests := len(b.fake.requests.all())
			if limited == nil {
				if err == nil || requests != 1 {
					t.Fatalf("a 403 without rate-limit headers: err %v after %d requests, want a failed pass after 1", err, requests)
				}
				return
			}
			if err != nil {
				t.Fatalf("an answer to wait for and retry failed the pass: %v", err)
			}
			wantCounts(t, res, 1, 1, 0)
			mu.Lock()
			defer mu.Unlock()
			if retried.Before(until) {
				t.Errorf("retried at %s, before the %s the limit asked to wait for", retried.Format(time.StampMilli), until.Format(time.StampMilli))
			}
		})
	}

	// A rate limit that asks to wait past what a pass waits fails the pass
	// as a limit, not as a refused token; any other 403 is a refusal.
	t.Run("RateLimitPastTheWaitFailsAsALimit", func(t *testing.T) {
		t.Parallel()
		for _, limited := range []bool{true, false} {
			b := setupGitHub(t, GitHubOptions{})
			b.fake.limit = func(w http.ResponseWriter, _ *http.Request) bool {
				if limited {
					w.Header().Set("X-RateLimit-Remaining", "0")
					w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
				}
				w.WriteHeader(http.StatusForbidden)
				return true
			}
			_, err := b.runner.Pass(context.Background(), PassOptions{})
			se, ok := errors.AsType[*StatusError](err)
			if !ok || se.Status != http.StatusForbidden || se.RateLimited != limited {
				t.Errorf("rate limited %v: err %v, want a 403 StatusError with RateLimited %v", limited, err, limited)
			}
		}
	})

	// GitHub's secondary rate limit is a 403 or 429 whose message says so,
	// with Retry-After or nothing, and X-RateLimit-Remaining maybe above 0;
	// a 429 may name no wait either. GitHub asks to wait at least a minute,
	// and longer each time: the client does, on its own clock.
	const secondary = `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`
	for name, tc := range map[string]struct {
		status     int
		body       string
		headers    map[string]string
		limits     int           // answers before the API lets the request through
		wantWaits  time.Duration // the least time from the first limit to the retry
		wantFailed bool
		lead       int // 502s the API answers before its limits
	}{
		"Secondary403WithoutHeaders":         {http.StatusForbidden, secondary, nil, 1, time.Minute, false, 0},
		"Secondary403WithRemainingAbove0":    {http.StatusForbidden, secondary, map[string]string{"X-RateLimit-Remaining": "4321"}, 1, time.Minute, false, 0},
		"Secondary403RetryAfterLongerIsKept": {http.StatusForbidden, secondary, map[string]string{"Retry-After": "90"}, 1, 90 * time.Second, false, 0},
		"Secondary429WithoutHeaders":         {http.StatusTooManyRequests, secondary, nil, 1, time.Minute, false, 0},
		"Plain429WithoutHeaders":             {http.StatusTooManyRequests, `{"message":"Too many requests"}`, nil, 1, time.Minute, false, 0},
		"SecondaryAgainWaitsLonger":          {http.StatusForbidden, secondary, nil, 2, 3 * time.Minute, false, 0},
		// 1m, 2m, then 4m: past maxWait, so the pass fails as a limit.
		"SecondaryPastTheWaitFailsAsALimit": {http.StatusForbidden, secondary, nil, 3, 0, true, 0},
		// The wait doubles with each limit, not with each try: after two
		// 502s the first limit still waits a minute.
		"SecondaryAfter5xxWaitsAMinute": {http.StatusForbidden, secondary, nil, 1, time.Minute, false, 2},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupGitHub(t, GitHubOptions{})
			b.fake.add("failed-1", "push", base.Add(-time.Hour), 500)
			clock := useFakeClock(b.runner.Reconciler.(*GitHub).client)
			var (
				mu     sync.Mutex
				starts []time.Time
			)
			b.fake.limit = func(w http.ResponseWriter, _ *http.Request) bool {
				mu.Lock()
				defer mu.Unlock()
				starts = append(starts, clock.Now())
				if len(starts) <= tc.lead {
					w.WriteHeader(http.StatusBadGateway)
					fmt.Fprint(w, `{"message":"Server Error"}`)
					return true
				}
				if len(starts) > tc.lead+tc.limits {
					return false
				}
				for k, v := range tc.headers {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
				return true
			}
			res, err := b.runner.Pass(context.Background(), PassOptions{})
			mu.Lock()
			defer mu.Unlock()
			if tc.wantFailed {
				se, ok := errors.AsType[*StatusError](err)
				if !ok || !se.RateLimited || !strings.Contains(err.Error(), "more than 2m0s") {
					t.Fatalf("err = %v, want a rate-limited StatusError past the 2m wait (not a refused token)", err)
				}
				if len(starts) != tc.limits {
					t.Fatalf("%d requests, want %d: a wait past 2m is not waited", len(starts), tc.limits)
				}
				return
			}
			if err != nil {
				t.Fatalf("a rate limit failed the pass: %v", err)
			}
			wantCounts(t, res, 1, 1, 0)
			if waited := starts[tc.lead+tc.limits].Sub(starts[tc.lead]); waited < tc.wantWaits {
				t.Fatalf("retried %v after the first limit, want at least %v", waited, tc.wantWaits)
			}
		})
	}

	// A redelivery gets an id after every delivery since, so one event's
	// attempts often stand on two pages: it is one event, listed and
	// fetched once, by its latest attempt.
	t.Run("AttemptsOnTwoPagesAreOneEvent", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		at := base.Add(-2 * time.Hour)
		b.fake.add("split", "push", at, 500)
		for i := range 120 {
			b.fake.add(fmt.Sprintf("ok-%03d", i), "push", at.Add(time.Minute), 200)
			b.delivered(t, fmt.Sprintf("ok-%03d", i))
		}
		b.fake.add("split", "push", at.Add(time.Hour), 502) // redelivered, failed again
		res := b.pass(t, PassOptions{})
		wantCounts(t, res, 121, 1, 120)
		fetches := 0
		for _, p := range b.fake.requests.all() {
			if !strings.Contains(p, "/deliveries?") {
				fetches++
				if !strings.HasSuffix(p, "/deliveries/122") {
					t.Errorf("fetched %s, want the latest attempt, 122", p)
				}
			}
		}
		if fetches != 1 {
			t.Errorf("%d fetches, want 1", fetches)
		}
	})

	t.Run("LinkPagingGroupsByGUIDAndFetchesOnlyTheMissing", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		at := base.Add(-2 * time.Hour)
		// 120 delivered, 60 failed and failed again when redelivered, 30
		// failed then were redelivered fine: 300 attempts, 3 pages of 100.
		// The store has what was delivered.
		for i := range 120 {
			b.fake.add(fmt.Sprintf("ok-%03d", i), "push", at, 200)
			b.delivered(t, fmt.Sprintf("ok-%03d", i))
		}
		for i := range 60 {
			b.fake.add(fmt.Sprintf("failed-%03d", i), "pull_request", at, 500, 502)
		}
		for i := range 30 {
			b.fake.add(fmt.Sprintf("retried-%03d", i), "push", at, 503, 200)
			b.delivered(t, fmt.Sprintf("retried-%03d", i))
		}
		res := b.pass(t, PassOptions{})
		wantCounts(t, res, 210, 60, 150)

		var lists, fetches int
		for _, p := range b.fake.requests.all() {
			if strings.Contains(p, "/deliveries?") {
				lists++
				if !strings.Contains(p, "per_page=100") {
					t.Errorf("list request %s without per_page=100", p)
				}
			} else {
				fetches++
			}
		}
		if lists != 3 || fetches != 60 {
			t.Fatalf("%d list pages and %d fetches, want 3 (Link cursor) and 60 (the failed only)", lists, fetches)
		}
		ev, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "failed-007"})
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != "pull_request" || ev.Origin != ferry.OriginCatchup || string(ev.Payload) != `{"action":"opened","guid":"failed-007"}` {
			t.Fatalf("stored type %q origin %q payload %s", ev.Type, ev.Origin, ev.Payload)
		}
		if ev.Headers.Get("X-GitHub-Delivery") != "failed-007" || ev.Headers.Get("Content-Type") != "application/json" {
			t.Fatalf("headers %v: want the delivery id and a JSON content type", ev.Headers)
		}
		for name := range ev.Headers {
			if strings.Contains(strings.ToLower(name), "signature") {
				t.Fatalf("a signature header was stored: %v", ev.Headers)
			}
		}
		ev, err = b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "retried-003"})
		if err != nil {
			t.Fatal(err)
		}
		if ev.Origin != ferry.OriginDelivery || ev.Deliveries != 1 {
			t.Fatalf("an event the store had: origin %q deliveries %d, want delivery and 1 (left alone)", ev.Origin, ev.Deliveries)
		}
	})

	// A 2xx delivery the store lacks (a database restored from a backup
	// taken before it) is fetched and received like a failed one.
	t.Run("DeliveredButMissingFromTheStoreIsReceived", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		b.fake.add("acked-since-backup", "push", base.Add(-time.Hour), 200)
		wantCounts(t, b.pass(t, PassOptions{}), 1, 1, 0)
		ev, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "acked-since-backup"})
		if err != nil {
			t.Fatalf("the delivered event the store lacked was not received: %v", err)
		}
		if ev.Origin != ferry.OriginCatchup || ev.Type != "push" {
			t.Fatalf("stored origin %q type %q, want catchup, push", ev.Origin, ev.Type)
		}
	})

	// A hook set to deliver form-encoded bodies sends the JSON as the form
	// field payload; GitHub's API returns it as JSON. The stored body is
	// what the live delivery would have been, so the app parses one format.
	t.Run("FormEncodedHookStoresTheFormBody", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		b.fake.form = true
		b.fake.add("form-1", "push", base.Add(-time.Hour), 500)
		wantCounts(t, b.pass(t, PassOptions{}), 1, 1, 0)
		ev, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "form-1"})
		if err != nil {
			t.Fatal(err)
		}
		live := url.Values{"payload": {`{"action":"opened","guid":"form-1"}`}}.Encode() // as GitHub posts it
		if string(ev.Payload) != live || ev.Headers.Get("Content-Type") != "application/x-www-form-urlencoded" {
			t.Fatalf("stored %q as %q; want the live body %q as application/x-www-form-urlencoded", ev.Payload, ev.Headers.Get("Content-Type"), live)
		}
	})

	// A delivery the receiver held as a suspected replay (its body matched
	// an earlier event's) is stored and sent on once GitHub's own list
	// shows its GUID: the list and the payload come from GitHub's API, so
	// the event is genuine, and holding it would lose it. An attacker's
	// re-send under a made-up GUID is never listed.
	t.Run("HeldReplayListedByGitHubIsStored", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		body := []byte(`{"action":"opened","guid":"held"}`) // what the fake serves for "held"
		for _, d := range []struct {
			id   string
			want ferry.ReceiveOutcome
		}{{"first", ferry.ReceiveNew}, {"held", ferry.ReceiveReplay}} {
			res, err := b.store.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "github", EventID: d.id, Type: "push", Payload: body, ReplayWindow: 72 * time.Hour})
			if err != nil || res.Outcome != d.want {
				t.Fatalf("receive %s: %+v, %v; want %s", d.id, res, err, d.want)
			}
		}
		b.fake.add("held", "push", base.Add(-time.Hour), 200)
		wantCounts(t, b.pass(t, PassOptions{}), 1, 1, 0)
		ev, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "held"})
		if err != nil || ev.Origin != ferry.OriginCatchup {
			t.Fatalf("the held delivery GitHub lists: %v, %v; want it stored by catch-up", ev, err)
		}
	})

	// A delivery newer than the window's end (within the settle time) is
	// left to GitHub's own delivery; a later pass takes it once settled.
	t.Run("UnsettledDeliveryWaits", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		b.fake.add("settled", "push", b.now.Add(-time.Hour), 500)
		b.fake.add("in-flight", "push", b.now.Add(-DefaultSettle/2), 500)
		res := b.pass(t, PassOptions{})
		wantCounts(t, res, 1, 1, 0)
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "in-flight"}); !errors.Is(err, ferry.ErrNotFound) {
			t.Fatalf("a delivery within the settle time was fetched: %v", err)
		}
		b.now = b.now.Add(DefaultSettle)
		b.pass(t, PassOptions{})
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "in-flight"}); err != nil {
			t.Fatalf("the delivery was not fetched once settled: %v", err)
		}
	})

	t.Run("StopsPagingBeforeTheWindow", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		for i := range 250 {
			b.fake.add(fmt.Sprintf("old-%03d", i), "push", base.Add(-10*24*time.Hour), 500)
		}
		for i := range 50 {
			b.fake.add(fmt.Sprintf("new-%03d", i), "push", base.Add(-time.Hour), 500)
		}
		wantCounts(t, b.pass(t, PassOptions{}), 50, 50, 0)
		if n := len(b.fake.requests.all()); n != 51 {
			t.Fatalf("%d requests, want one page and 50 fetches: the older pages must not be read", n)
		}
	})

	// A delivery listed without delivered_at (null, against GitHub's
	// schema) is taken, and does not end the listing as if it were older
	// than the window: the pages after it are read.
	t.Run("UndatedDeliveryDoesNotEndTheListing", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		for i := range 120 {
			b.fake.add(fmt.Sprintf("g-%03d", i), "push", base.Add(-2*time.Hour+time.Duration(i)*time.Second), 500)
		}
		b.fake.add("undated", "push", time.Time{}, 500) // the newest: first on page one
		// Refused, it is not taken as expired (its age is unknown): the
		// pass takes the rest and fails, and the next takes it.
		var refuse atomic.Bool
		refuse.Store(true)
		b.fake.limit = func(w http.ResponseWriter, r *http.Request) bool {
			if !refuse.Load() || !strings.HasSuffix(r.URL.Path, "/deliveries/121") {
				return false
			}
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"message":"Not Found"}`)
			return true
		}
		res, err := b.runner.Pass(context.Background(), PassOptions{})
		if !errors.Is(err, ErrRefusedForNow) || res.New != 120 || res.Skipped != 0 {
			t.Fatalf("err = %v, new=%d skipped=%d; want the undated delivery refused for now, the other 120 taken", err, res.New, res.Skipped)
		}
		refuse.Store(false)
		wantCounts(t, b.pass(t, PassOptions{}), 121, 1, 120)
	})

	// The deliveries API has no time filter: a long window listed in
	// steps would read the newest pages once a step.
	t.Run("LongWindowIsListedOnce", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		for i := range 300 {
			b.fake.add(fmt.Sprintf("g-%03d", i), "push", base.Add(-70*time.Hour+time.Duration(i)*13*time.Minute), 200)
			b.delivered(t, fmt.Sprintf("g-%03d", i))
		}
		wantCounts(t, b.pass(t, PassOptions{}), 300, 0, 300)
		if n := len(b.fake.requests.all()); n != 3 {
			t.Fatalf("%d requests for a 72h window of 300 deliveries, want 3 pages of 100", n)
		}
	})

	// A pass cut short while listing (an API error, the pass timeout)
	// keeps the events of the pages it read; the next pass finds them
	// known without fetching them again, and only a window listed whole
	// moves the checkpoint.
	t.Run("PassCutShortKeepsThePagesItRead", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		for i := range 250 {
			b.fake.add(fmt.Sprintf("g-%03d", i), "push", base.Add(-time.Hour), 500)
		}
		var broken atomic.Bool
		broken.Store(true)
		b.fake.limit = func(w http.ResponseWriter, r *http.Request) bool {
			if !broken.Load() || r.URL.Query().Get("cursor") != "200" {
				return false
			}
			w.WriteHeader(http.StatusBadRequest) // not retried: the pass fails at once
			return true
		}
		if _, err := b.runner.Pass(context.Background(), PassOptions{}); err == nil {
			t.Fatal("a pass whose third page fails succeeded")
		}
		list, err := b.store.EventList(context.Background(), &ferry.EventListParams{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Events) != 200 {
			t.Fatalf("%d events stored after a pass cut short on page 3, want the 200 of pages 1 and 2", len(list.Events))
		}
		if _, ok := checkpoint(t, b.store, "github"); ok {
			t.Fatal("the checkpoint advanced past a window not listed whole")
		}
		broken.Store(false)
		before := len(b.fake.requests.all())
		wantCounts(t, b.pass(t, PassOptions{}), 250, 50, 200)
		fetches := 0
		for _, p := range b.fake.requests.all()[before:] {
			if !strings.Contains(p, "/deliveries?") {
				fetches++
			}
		}
		if fetches != 50 {
			t.Fatalf("the next pass fetched %d deliveries, want the 50 the first did not reach", fetches)
		}
		if _, ok := checkpoint(t, b.store, "github"); !ok {
			t.Fatal("a pass that listed the window whole left the checkpoint")
		}
	})

	// A delivery GitHub will never return (refused in the last hour of its
	// 3 days, so expired or about to be; too large to read; without a
	// payload) is skipped with a warning: failing the pass would fail every
	// pass until it aged out.
	t.Run("UnfetchableDeliveryIsSkipped", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		// Attempt ids follow the order added: g-0 is delivery 1.
		answers := map[string]func(w http.ResponseWriter){
			"1": func(w http.ResponseWriter) { w.WriteHeader(http.StatusGone) },
			"3": func(w http.ResponseWriter) { w.WriteHeader(http.StatusUnprocessableEntity) },
			"4": func(w http.ResponseWriter) { _, _ = w.Write(make([]byte, maxBody+1)) },
			"5": func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) },
			"6": func(w http.ResponseWriter) {
				_, _ = w.Write([]byte(`{"guid":"g-5","event":"push","request":{"headers":{},"payload":null}}`))
			},
		}
		// 71h old and older, by the runner's clock: the refusals are
		// taken as expired.
		for i := range 6 {
			b.fake.add(fmt.Sprintf("g-%d", i), "push", base.Add(-githubExpiring-time.Duration(i)*time.Minute), 500)
		}
		b.fake.limit = func(w http.ResponseWriter, r *http.Request) bool {
			_, id, _ := strings.Cut(r.URL.Path, "/deliveries/")
			if answer := answers[id]; answer != nil {
				answer(w)
				return true
			}
			return false
		}
		res := b.pass(t, PassOptions{})
		if res.Fetched != 6 || res.New != 1 || res.Skipped != 5 || !res.Advanced {
			t.Fatalf("fetched=%d new=%d skipped=%d advanced=%v, want 6 1 5 true", res.Fetched, res.New, res.Skipped, res.Advanced)
		}
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "g-1"}); err != nil {
			t.Fatalf("the fetchable event was not received: %v", err)
		}
		if n := strings.Count(b.logsText(), "skipped an event"); n != 5 || strings.Contains(b.logsText(), githubToken) {
			t.Fatalf("%d skips logged, want 5, without the token:\n%s", n, b.logsText())
		}
	})

	// A delivery's age is judged by GitHub's clock, as its answers' Date
	// shows it, not this host's: a host 2h ahead does not take a delivery
	// GitHub keeps for 2h30m more as expired (the pass fails and keeps the
	// checkpoint), and one 2h behind does not keep a pass failing on one
	// GitHub has let go.
	t.Run("ExpiryIsJudgedByGitHubsClock", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name    string
			ahead   time.Duration // the host's clock less GitHub's
			age     time.Duration // by GitHub's clock
			expired bool
		}{
			{"HostAhead", 2 * time.Hour, githubExpiring - 90*time.Minute, false},
			{"HostBehind", -2 * time.Hour, githubExpiring + 30*time.Minute, true},
		} {
			b := setupGitHub(t, GitHubOptions{})
			github := b.now
			b.fake.date = func() time.Time { return github }
			b.now = github.Add(tc.ahead) // the runner's clock and the reconciler's
			b.fake.add("g-refused", "push", github.Add(-tc.age), 500)
			b.fake.refuseFetch("1", http.StatusUnprocessableEntity)
			res, err := b.runner.Pass(context.Background(), PassOptions{})
			if tc.expired {
				if err != nil || res.Skipped != 1 {
					t.Errorf("%s: err = %v, skipped=%d; want the delivery %s old by GitHub's clock skipped as expired", tc.name, err, res.Skipped, tc.age)
				}
				continue
			}
			if !errors.Is(err, ErrRefusedForNow) || res.Skipped != 0 || res.Advanced {
				t.Errorf("%s: err = %v, skipped=%d advanced=%v; want ErrRefusedForNow for a delivery %s old by GitHub's clock, the checkpoint kept", tc.name, err, res.Skipped, res.Advanced, tc.age)
			}
		}
	})

	// GitHub answers 422 when it throttles and 404 to credentials that may
	// not read the hook: a refusal of a delivery younger than 71h is no
	// sign it expired. The pass fails naming the status, the checkpoint
	// stays, and the next pass fetches it.
	t.Run("RefusedFetchWithinRetentionFailsThePass", func(t *testing.T) {
		t.Parallel()
		for _, status := range []int{http.StatusNotFound, http.StatusGone, http.StatusUnprocessableEntity} {
			b := setupGitHub(t, GitHubOptions{})
			// Listed after young (newest first, by delivery id), and near
			// GitHub's 3 days: refusing young must not keep it from being
			// fetched.
			b.fake.add("old", "push", base.Add(-githubExpiring+2*time.Second), 500)
			b.fake.add("young", "push", base.Add(-githubExpiring+3*time.Second), 500) // delivery 2
			var refuse atomic.Bool
			refuse.Store(true)
			b.fake.limit = func(w http.ResponseWriter, r *http.Request) bool {
				if !refuse.Load() || !strings.HasSuffix(r.URL.Path, "/deliveries/2") {
					return false
				}
				w.WriteHeader(status)
				fmt.Fprint(w, `{"message":"Validation failed, or the endpoint has been spammed."}`)
				return true
			}
			res, err := b.runner.Pass(context.Background(), PassOptions{})
			se, ok := errors.AsType[*StatusError](err)
			if !ok || se.Status != status || !strings.Contains(err.Error(), fmt.Sprintf("HTTP %d", status)) {
				t.Fatalf("HTTP %d: err = %v, want the pass failed naming the status", status, err)
			}
			if !errors.Is(err, ErrRefusedForNow) || res.Skipped != 0 || res.Advanced {
				t.Fatalf("HTTP %d: err = %v, skipped=%d advanced=%v; want ErrRefusedForNow, neither skipped nor advanced", status, err, res.Skipped, res.Advanced)
			}
			if _, ok := checkpoint(t, b.store, "github"); ok {
				t.Fatalf("HTTP %d: the checkpoint advanced past a delivery not fetched", status)
			}
			if res.New != 1 {
				t.Fatalf("HTTP %d: new=%d, want the older delivery taken past the refused one", status, res.New)
			}
			if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "old"}); err != nil {
				t.Fatalf("HTTP %d: the older delivery was not stored: %v", status, err)
			}
			refuse.Store(false)
			wantCounts(t, b.pass(t, PassOptions{}), 2, 1, 1)
		}
	})

	// A Link that points to a page already read (a cache or proxy that
	// drops the cursor) fails the pass: reading on would loop until the
	// pass's timeout, and forever in `ferry reconcile`.
	t.Run("RepeatedNextPageFailsThePass", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		for i := range 150 {
			b.fake.add(fmt.Sprintf("g-%03d", i), "push", base.Add(-time.Hour), 200)
			b.delivered(t, fmt.Sprintf("g-%03d", i))
		}
		b.fake.repeatNext = true
		b.wantRepeatedPageFails(t, "was already read in this pass", func() int { return len(b.fake.requests.all()) })
	})

	// The Link header names GitHub's host, which a proxy in api_base does
	// not rewrite (here another server's): the next page is its cursor on
	// api_base, and the token never goes to the host the Link names.
	t.Run("NextPageIsReadFromTheAPIBase", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		var stolen sync.Map
		elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			stolen.Store(r.Header.Get("Authorization"), true)
			_, _ = w.Write([]byte("[]"))
		}))
		t.Cleanup(elsewhere.Close)
		b.fake.nextHost = elsewhere.URL
		for i := range 150 {
			b.fake.add(fmt.Sprintf("g-%03d", i), "push", base.Add(-time.Hour), 500)
		}
		wantCounts(t, b.pass(t, PassOptions{}), 150, 150, 0)
		stolen.Range(func(k, _ any) bool {
			t.Fatalf("a request went to the host the Link names, with Authorization %q", k)
			return false
		})
	})

	t.Run("TokenNeverInErrorsOrLogs", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		b.fake.auth = func(*http.Request) bool { return false } // and echoes what it got
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.runner.Run(ctx, time.Hour, "test") }()
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && !strings.Contains(b.logs.String(), "pass failed"); {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-done
		_, err := b.runner.Pass(context.Background(), PassOptions{})
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Fatalf("err = %v, want a 401", err)
		}
		if strings.Contains(err.Error(), githubToken) || strings.Contains(b.logs.String(), githubToken) {
			t.Fatalf("the token leaked:\nerror: %v\nlogs:\n%s", err, b.logs.String())
		}
		if !strings.Contains(b.logs.String(), "pass failed") {
			t.Fatalf("no failure logged:\n%s", b.logs.String())
		}
	})

	t.Run("AppJWTThenInstallationToken", func(t *testing.T) {
		t.Parallel()
		key, pemKey := appKey(t)
		b := setupGitHub(t, GitHubOptions{AppID: "12345", PrivateKey: pemKey, InstallationID: "678"})
		ex := b.appExchange(&key.PublicKey)
		for i := range 3 {
			b.fake.add(fmt.Sprintf("g-%d", i), "push", base.Add(-time.Hour), 500)
		}
		wantCounts(t, b.pass(t, PassOptions{}), 3, 3, 0)
		if n, refused := ex.counts(); n != 1 || refused != 0 {
			t.Fatalf("%d token exchanges, %d refused; want 1 (the token is cached), none refused", n, refused)
		}
	})

	// A host clock ahead of GitHub's by more than the JWT's minute of
	// slack, or behind it by more than its nine minutes, dates every JWT
	// outside what GitHub takes. The 401's Date shows GitHub's clock: the
	// JWT is signed anew by it and sent again once, and the installation
	// token's expiry is judged by it too.
	t.Run("AppCredentialsFollowGitHubsClock", func(t *testing.T) {
		t.Parallel()
		for _, skew := range []time.Duration{2 * time.Minute, -15 * time.Minute} {
			key, pemKey := appKey(t)
			var b *githubBundle
			b = setupGitHub(t, GitHubOptions{AppID: "12345", PrivateKey: pemKey, InstallationID: "678",
				Now: func() time.Time { return b.now.Add(skew) }})
			ex := b.appExchange(&key.PublicKey)
			b.fake.add("g-1", "push", base.Add(-time.Hour), 500)
			wantCounts(t, b.pass(t, PassOptions{}), 1, 1, 0)
			if n, refused := ex.counts(); n != 1 || refused != 1 {
				t.Fatalf("host clock %v off: %d token exchanges, %d refused; want the misdated JWT refused once, then one exchange", skew, n, refused)
			}
			// The token lasts an hour by GitHub's clock: past it, a new one
			// is asked for, whatever the host's clock says.
			b.now = b.now.Add(61 * time.Minute)
			b.fake.add("g-2", "push", b.now.Add(-5*time.Minute), 500)
			wantCounts(t, b.pass(t, PassOptions{}), 1, 1, 0)
			if n, refused := ex.counts(); n != 2 || refused != 1 {
				t.Fatalf("host clock %v off: %d token exchanges, %d refused after the token's hour; want 2, 1", skew, n, refused)
			}
		}
	})

	// An event catch-up stores keeps the headers a receiver would have kept
	// of the same delivery: the same names, no signature.
	t.Run("HeadersAsTheReceiverKeepsThem", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		b.fake.add("g-h", "push", base.Add(-time.Hour), 500)
		b.pass(t, PassOptions{})
		caught, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "g-h"})
		if err != nil {
			t.Fatal(err)
		}

		live := teststore.SQLite(t, nil)
		verifier, err := provider.NewGitHub(provider.Options{Secrets: []string{"s"}})
		if err != nil {
			t.Fatal(err)
		}
		receiver, err := ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{Store: live, Sources: []ferryhttp.Source{{Name: "github", Verifier: verifier}},
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(receiver.Handler(http.NotFoundHandler()))
		defer srv.Close()
		req := ferrytest.NewRequest(srv.URL+"/webhooks/github", ferrytest.SignGitHub("s", "g-h", "push", caught.Payload), caught.Payload)
		req.RequestURI = ""
		for name, v := range githubSent("g-h", "push") {
			req.Header.Set(name, v)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		received, err := live.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "g-h"})
		if err != nil {
			t.Fatalf("the receiver answered %d and stored nothing: %v", res.StatusCode, err)
		}
		if !reflect.DeepEqual(caught.Headers, received.Headers) {
			t.Fatalf("catch-up kept %v; the receiver keeps %v", caught.Headers, received.Headers)
		}
	})

	// A 401 to the JWT from a host whose clock agrees with GitHub's is the
	// App's credentials' (here a key GitHub does not hold): the JWT is not
	// signed anew and sent again, and the pass fails with the 401.
	t.Run("AppKeyRefusedIsNotResent", func(t *testing.T) {
		t.Parallel()
		_, pemKey := appKey(t)
		other, _ := appKey(t)
		var b *githubBundle
		b = setupGitHub(t, GitHubOptions{AppID: "12345", PrivateKey: pemKey, InstallationID: "678",
			Now: func() time.Time { return b.now }})
		ex := b.appExchange(&other.PublicKey)
		b.wantUnauthorized(t)
		if n, refused := ex.counts(); n != 0 || refused != 1 {
			t.Fatalf("%d token exchanges, %d refused; want the JWT refused once and not sent again", n, refused)
		}
	})

	// A 401 to a request that carried the installation token is sent
	// once more with a new token (GitHub revokes tokens before they
	// expire), and a second 401 is the credentials': not sent again.
	t.Run("AppTokenRefusedIsRenewedOnce", func(t *testing.T) {
		t.Parallel()
		key, pemKey := appKey(t)
		b := setupGitHub(t, GitHubOptions{AppID: "12345", PrivateKey: pemKey, InstallationID: "678",
			Now: func() time.Time { return base }}) // the host's clock stays
		ex := b.appExchange(&key.PublicKey)
		b.pass(t, PassOptions{})
		b.now = b.now.Add(45 * time.Second) // GitHub's clock moves on, the host's stays
		b.fake.auth = func(*http.Request) bool { return false }
		before := len(b.fake.requests.all())
		b.wantUnauthorized(t)
		if n := len(b.fake.requests.all()) - before; n != 2 {
			t.Fatalf("%d listing requests after the token was refused, want 2: sent once more, then not again", n)
		}
		if n, refused := ex.counts(); n != 2 || refused != 0 {
			t.Fatalf("%d token exchanges, %d refused; want 2, 0: one new token for the resend", n, refused)
		}
	})

	// A token GitHub revoked before its hour (DELETE /installation/token,
	// secret scanning) is replaced at once, not kept until it expires.
	t.Run("RevokedAppTokenIsReplaced", func(t *testing.T) {
		t.Parallel()
		key, pemKey := appKey(t)
		b := setupGitHub(t, GitHubOptions{AppID: "12345", PrivateKey: pemKey, InstallationID: "678"})
		ex := b.appExchange(&key.PublicKey)
		b.pass(t, PassOptions{})
		valid := b.fake.auth
		b.fake.auth = func(r *http.Request) bool {
			return !strings.HasSuffix(r.Header.Get("Authorization"), "token001") && valid(r)
		}
		b.now = b.now.Add(10 * time.Minute) // within the token's hour
		b.fake.add("g-1", "push", b.now.Add(-5*time.Minute), 500)
		wantCounts(t, b.pass(t, PassOptions{}), 1, 1, 0)
		if n, _ := ex.counts(); n != 2 {
			t.Fatalf("%d token exchanges, want 2: the revoked token replaced", n)
		}
	})

	// The App's JWT and installation token are reused until they near
	// expiry, and each new one replaces its predecessor among the secrets
	// scrubbed from errors: the list stays short however long serve runs.
	t.Run("AppCredentialsReplaceTheirPredecessors", func(t *testing.T) {
		t.Parallel()
		_, pemKey := appKey(t)
		var (
			mu    sync.Mutex
			clock = base // the App's clock; the fake dates tokens by it
			jwts  = map[string]bool{}
			n     int
		)
		now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
		b := setupGitHub(t, GitHubOptions{AppID: "12345", PrivateKey: pemKey, InstallationID: "678", Now: now})
		wrapped := b.fake
		b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/app/installations/678/access_tokens" {
				wrapped.ServeHTTP(w, r)
				return
			}
			mu.Lock()
			jwts[r.Header.Get("Authorization")] = true
			n++
			token, expires := fmt.Sprintf("ghs_token%03d", n), clock.Add(10*time.Minute)
			mu.Unlock()
			fmt.Fprintf(w, `{"token":%q,"expires_at":%q}`, token, expires.Format(time.RFC3339))
		})
		wrapped.auth = func(r *http.Request) bool {
			return strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ghs_token")
		}
		g := b.runner.Reconciler.(*GitHub)
		for range 30 {
			b.pass(t, PassOptions{})
			mu.Lock()
			clock = clock.Add(5 * time.Minute)
			mu.Unlock()
			b.now = b.now.Add(5 * time.Minute)
		}
		mu.Lock()
		defer mu.Unlock()
		if n < 10 || len(jwts) < 5 {
			t.Fatalf("%d token exchanges with %d JWTs over 150 minutes: want both renewed as they expire", n, len(jwts))
		}
		g.client.mu.Lock()
		defer g.client.mu.Unlock()
		if len(g.client.secrets) != 3 {
			t.Fatalf("%d secrets after %d tokens and %d JWTs, want 3: the key, the JWT and the token in use", len(g.client.secrets), n, len(jwts))
		}
	})

	t.Run("AppHookUsesTheJWT", func(t *testing.T) {
		t.Parallel()
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		der, _ := x509.MarshalPKCS8PrivateKey(key)
		b := setupGitHub(t, GitHubOptions{Hook: "app/hook", AppID: "99", PrivateKey: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))})
		b.fake.hook = "app/hook"
		b.fake.auth = func(r *http.Request) bool {
			return validJWT(r, &key.PublicKey, "99", b.now)
		}
		b.fake.add("g-1", "installation", base.Add(-time.Hour), 500)
		wantCounts(t, b.pass(t, PassOptions{}), 1, 1, 0)
		// Every request carries the JWT: it is signed once, not per request.
		for range 5 {
			b.now = b.now.Add(time.Minute)
			b.pass(t, PassOptions{})
		}
		g := b.runner.Reconciler.(*GitHub)
		g.client.mu.Lock()
		defer g.client.mu.Unlock()
		if len(g.client.secrets) != 2 {
			t.Fatalf("%d secrets after 6 passes, want 2: the key and the JWT", len(g.client.secrets))
		}
	})
}

// appKey returns a GitHub App's private key, and its PEM as GitHub hands
// it out.
func appKey(t *testing.T) (*rsa.PrivateKey, string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
}

// validJWT checks r's RS256 JWT as GitHub does at now: signature, issuer,
// issued in the past, and an expiry at most ten minutes ahead.
func validJWT(r *http.Request, pub *rsa.PublicKey, iss string, now time.Time) bool {
	jwt := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return false
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) != nil {
		return false
	}
	var header struct{ Alg string }
	raw, _ := base64.RawURLEncoding.DecodeString(parts[0])
	if json.Unmarshal(raw, &header) != nil || header.Alg != "RS256" {
		return false
	}
	var claims struct {
		Iss      string
		Iat, Exp int64
	}
	raw, _ = base64.RawURLEncoding.DecodeString(parts[1])
	if json.Unmarshal(raw, &claims) != nil {
		return false
	}
	at := now.Unix()
	return claims.Iss == iss && claims.Iat <= at && claims.Exp > at && claims.Exp-at <= 600
}

// exchange is a fake of GitHub's installation-token exchange.
type exchange struct {
	mu         sync.Mutex
	n, refused int
}

func (e *exchange) counts() (n, refused int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, e.refused
}

// wantUnauthorized runs a pass that must fail on GitHub's 401.
func (b *githubBundle) wantUnauthorized(t *testing.T) {
	t.Helper()
	if _, err := b.runner.Pass(context.Background(), PassOptions{}); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("err = %v, want the 401", err)
	}
}

// appExchange has b's fake exchange the App's JWT for installation 678's
// token as GitHub would at b.now, its clock: the token lasts an hour, and
// the deliveries take only a token not yet expired.

func (b *githubBundle) appExchange(pub *rsa.PublicKey) *exchange {
	ex := &exchange{}
	expiry := map[string]time.Time{}
	wrapped := b.fake
	b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/app/installations/678/access_tokens" {
			wrapped.ServeHTTP(w, r)
			return
		}
		setDate(w, wrapped.date)
		ex.mu.Lock()
		defer ex.mu.Unlock()
		if r.Method != http.MethodPost || !validJWT(r, pub, "12345", b.now) {
			ex.refused++
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"message":"'Issued at' claim ('iat') must be an Integer representing a time in the past"}`)
			return
		}
		ex.n++
		token := fmt.Sprintf("ghs_INSTALLATIONtoken%03d", ex.n)
		expiry[token] = b.now.Add(time.Hour)
		fmt.Fprintf(w, `{"token":%q,"expires_at":%q}`, token, expiry[token].Format(time.RFC3339))
	})
	wrapped.auth = func(r *http.Request) bool {
		ex.mu.Lock()
		defer ex.mu.Unlock()
		exp, ok := expiry[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		return ok && b.now.Before(exp)
	}
	return ex
}
