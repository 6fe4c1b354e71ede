package catchup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/testlog"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/sqlite"
)

// base is the wall-clock instant the tests' runners see as now.
var base = time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)

// fakeStripe serves GET /v1/events from its events, newest first, with
// Stripe's filters and paging. fail, when set, may answer a request
// instead (return true once it has written a response).
type fakeStripe struct {
	t        *testing.T
	key      string
	mu       sync.Mutex
	events   []stripeEvent // any order
	requests requestLog[stripeRequest]
	fail     func(n int, w http.ResponseWriter, r *http.Request) bool
	// delay, when set, is slept per event a page lists: a slow API.
	delay time.Duration
	// ignoreCursor, when set, serves every page as the first: a cache or
	// proxy that drops starting_after.
	ignoreCursor bool
	// date, when set, is the provider's clock its answers' Date header
	// gives; setupStripe sets the runner's.
	date func() time.Time
}

type stripeEvent struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	APIVersion string `json:"api_version,omitempty"`
	Type       string `json:"type"`
	Created    int64  `json:"created"`
	Failed     bool   `json:"-"`
}

type stripeRequest struct {
	at    time.Time
	query url.Values
}

func (f *fakeStripe) add(n int, created time.Time, prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("evt_%s%03d", prefix, i)
		f.events = append(f.events, stripeEvent{ID: id, Object: "event", Type: "invoice.paid", Created: created.Add(time.Duration(i) * time.Second).Unix()})
		ids = append(ids, id)
	}
	return ids
}

// addType adds one event of type typ.
func (f *fakeStripe) addType(id, typ string, created time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, stripeEvent{ID: id, Object: "event", Type: typ, Created: created.Unix()})
}

// addVersion adds one invoice.paid event rendered in API version v.
func (f *fakeStripe) addVersion(id, v string, created time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, stripeEvent{ID: id, Object: "event", APIVersion: v, Type: "invoice.paid", Created: created.Unix()})
}

func (f *fakeStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.requests.record(stripeRequest{at: time.Now(), query: r.URL.Query()})
	f.mu.Lock()
	events := slices.Clone(f.events)
	delay, ignoreCursor := f.delay, f.ignoreCursor
	f.mu.Unlock()
	setDate(w, f.date)
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Invalid API Key provided: %s"}}`, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		return
	}
	if f.fail != nil && f.fail(n, w, r) {
		return
	}
	if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	if len(q["types[]"]) > 20 { // Stripe's limit
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"types: at most 20"}}`)
		return
	}
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	lte, _ := strconv.ParseInt(q.Get("created[lte]"), 10, 64)
	limit, _ := strconv.Atoi(q.Get("limit"))
	types := q["types[]"]
	slices.SortFunc(events, func(a, b stripeEvent) int { // newest first
		if c := b.Created - a.Created; c != 0 {
			return int(c)
		}
		return strings.Compare(b.ID, a.ID)
	})
	var match []stripeEvent
	for _, e := range events {
		if e.Created < gte || (lte > 0 && e.Created > lte) ||
			(len(types) > 0 && !slices.Contains(types, e.Type)) ||
			(q.Get("delivery_success") == "false" && !e.Failed) {
			continue
		}
		match = append(match, e)
	}
	if after := q.Get("starting_after"); after != "" && !ignoreCursor {
		// The cursor is a place in the account's list, filtered or not;
		// an id Stripe does not know is refused, as Stripe does.
		i := slices.IndexFunc(events, func(e stripeEvent) bool { return e.ID == after })
		if i < 0 {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"code":"resource_missing","doc_url":"https://stripe.com/docs/error-codes/resource-missing","message":"No such event: '%s'","param":"starting_after","type":"invalid_request_error"}}`, after)
			return
		}
		before := map[string]bool{}
		for _, e := range events[:i+1] {
			before[e.ID] = true
		}
		match = slices.DeleteFunc(match, func(e stripeEvent) bool { return before[e.ID] })
	}
	hasMore := len(match) > limit
	if hasMore {
		match = match[:limit]
	}
	time.Sleep(time.Duration(len(match)) * delay)
	// Written by hand: the encoder would compact the indented objects,
	// and Stripe sends them indented.
	data := make([]string, len(match))
	for i, e := range match {
		obj, _ := json.MarshalIndent(e, "", "  ")
		data[i] = string(obj)
	}
	fmt.Fprintf(w, `{"object": "list", "data": [%s], "has_more": %t}`, strings.Join(data, ", "), hasMore)
}

// runBundle is what a provider's tests share: a store, a runner on it
// that reads the time from now, and the runner's logs.
type runBundle struct {
	store  *sqlite.Store
	runner *Runner
	logs   *testlog.Buffer
	now    time.Time
}

func newRunBundle(t *testing.T) runBundle {
	return runBundle{store: teststore.SQLite(t, nil), logs: &testlog.Buffer{}, now: base}
}

// start makes the runner for source on r, logging JSON at level and up.
func (b *runBundle) start(source string, r Reconciler, level slog.Level) {
	b.runner = &Runner{
		Source: source, Reconciler: r, Store: b.store,
		Logger: slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: level})),
		Now:    func() time.Time { return b.now },
	}
}

// requestLog keeps the requests a fake provider was sent, in order, for
// the test to read while the server's goroutines add to it.
type requestLog[T any] struct {
	mu   sync.Mutex
	reqs []T
}

// record adds req and returns how many requests there have been.
func (l *requestLog[T]) record(req T) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, req)
	return len(l.reqs)
}

// all returns a copy of the requests so far.
func (l *requestLog[T]) all() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

// setDate sets the Date header from date, as a provider's clock; nil
// leaves the server's, and a zero time sends none.
func setDate(w http.ResponseWriter, date func() time.Time) {
	if date == nil {
		return
	}
	if at := date(); at.IsZero() {
		w.Header()["Date"] = nil // the server adds none
	} else {
		w.Header().Set("Date", at.UTC().Format(http.TimeFormat))
	}
}

func (b *runBundle) logsText() string { return b.logs.String() }

func (b *runBundle) pass(t *testing.T, opts PassOptions) *Result {
	t.Helper()
	res, err := b.runner.Pass(context.Background(), opts)
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	return res
}

// outage runs a pass, moves the clock on by d, and returns the next pass.
func (b *runBundle) outage(t *testing.T, d time.Duration) *Result {
	t.Helper()
	b.pass(t, PassOptions{})
	b.now = b.now.Add(d)
	return b.pass(t, PassOptions{})
}

// wantRepeatedPageFails runs a pass on a listing whose second page repeats
// the first and wants it to fail naming the repeat (want), after exactly
// those two requests as requests counts them, with no checkpoint written.
func (b *runBundle) wantRepeatedPageFails(t *testing.T, want string, requests func() int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a ceiling, not a wait
	defer cancel()
	_, err := b.runner.Pass(ctx, PassOptions{})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want the repeated page named", err)
	}
	if n := requests(); n != 2 {
		t.Fatalf("%d requests, want 2: the first page, then the same page again", n)
	}
	if _, ok := checkpoint(t, b.store, b.runner.Source); ok {
		t.Fatal("the checkpoint advanced past a window not listed")
	}
}

type stripeBundle struct {
	runBundle
	fake *fakeStripe
}

func setupStripe(t *testing.T, opts StripeOptions) *stripeBundle {
	t.Helper()
	b := &stripeBundle{runBundle: newRunBundle(t), fake: &fakeStripe{t: t, key: "sk_test_51SECRETkeyABC"}}
	b.fake.date = func() time.Time { return b.now }
	srv := httptest.NewServer(b.fake)
	t.Cleanup(srv.Close)
	if opts.APIKey == "" {
		opts.APIKey = b.fake.key
	}
	opts.APIBase = srv.URL
	if opts.Rate == 0 {
		opts.Rate = 1000
	}
	if opts.Types == nil {
		opts.Types = []string{"*"} // add's events are all invoice.paid
	}
	r, err := NewStripe(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.client.backoff = time.Millisecond
	b.start("stripe", r, slog.LevelDebug)
	return b
}

func checkpoint(t *testing.T, st ferry.Store, source string) (time.Time, bool) {
	t.Helper()
	cp, err := st.CheckpointGet(context.Background(), &ferry.CheckpointGetParams{Name: CheckpointName(source)})
	if errors.Is(err, ferry.ErrNotFound) {
		return time.Time{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339Nano, cp.Value)
	if err != nil {
		t.Fatal(err)
	}
	return at, true
}

func wantCounts(t *testing.T, res *Result, fetched, new, known int) {
	t.Helper()
	if res.Fetched != fetched || res.New != new || res.Known != known {
		t.Fatalf("fetched=%d new=%d known=%d, want %d %d %d", res.Fetched, res.New, res.Known, fetched, new, known)
	}
}

func TestStripe(t *testing.T) {
	t.Parallel()

	t.Run("PagesUntilHasMoreIsFalse", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.runner.Lookback = time.Hour // one step: every request is a page
		ids := b.fake.add(250, base.Add(-time.Hour), "a")
		res := b.pass(t, PassOptions{})
		wantCounts(t, res, 250, 250, 0)
		reqs := b.fake.requests.all()
		if len(reqs) != 3 {
			t.Fatalf("%d requests, want 3 pages of 100", len(reqs))
		}
		for i, r := range reqs {
			if r.query["limit"][0] != "100" {
				t.Errorf("request %d limit = %v, want 100", i, r.query["limit"])
			}
		}
		// Newest first: page 2 starts after the 100th newest.
		if got := reqs[1].query["starting_after"]; len(got) != 1 || got[0] != ids[150] {
			t.Errorf("page 2 starting_after = %v, want %s", got, ids[150])
		}
		ev, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: ids[7]})
		if err != nil {
			t.Fatal(err)
		}
		if ev.Origin != ferry.OriginCatchup || ev.Type != "invoice.paid" {
			t.Errorf("stored origin %q type %q, want catchup, invoice.paid", ev.Origin, ev.Type)
		}
		var obj stripeEvent
		if err := json.Unmarshal(ev.Payload, &obj); err != nil || obj.ID != ids[7] || !bytes.HasPrefix(ev.Payload, []byte("{\n  \"id\"")) {
			t.Errorf("payload is not the API's event object byte for byte: %s", ev.Payload)
		}
		if cp, ok := checkpoint(t, b.store, "stripe"); !ok || !cp.Equal(res.To) {
			t.Errorf("checkpoint = %v, want the window's end %v", cp, res.To)
		}
	})

	t.Run("FiltersFromConfig", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{Types: []string{"invoice.paid", "charge.refunded"}, OnlyFailed: true})
		b.pass(t, PassOptions{})
		q := b.fake.requests.all()[0].query
		if !slices.Equal(q["types[]"], []string{"invoice.paid", "charge.refunded"}) || q.Get("delivery_success") != "false" {
			t.Fatalf("query %v: want types[] and delivery_success=false", q)
		}
		if q.Get("created[gte]") != strconv.FormatInt(base.Add(-DefaultLookback).Unix(), 10) {
			t.Fatalf("created[gte] = %s, want now - lookback", q.Get("created[gte]"))
		}
	})

	// Types not listed are never received: the endpoint was not sent them.
	t.Run("OnlyListedTypes", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{Types: []string{"invoice.paid"}})
		b.fake.add(3, base.Add(-time.Hour), "a")
		b.fake.addType("evt_other", "customer.created", base.Add(-time.Hour))
		wantCounts(t, b.pass(t, PassOptions{}), 3, 3, 0)
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_other"}); !errors.Is(err, ferry.ErrNotFound) {
			t.Fatalf("an unlisted type was stored: err = %v", err)
		}
	})

	// "*" lists every type: Stripe gets no types[] filter.
	t.Run("StarSendsNoTypes", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{Types: []string{"*"}})
		b.fake.add(3, base.Add(-time.Hour), "a")
		b.fake.addType("evt_other", "customer.created", base.Add(-time.Hour))
		wantCounts(t, b.pass(t, PassOptions{}), 4, 4, 0)
		for i, r := range b.fake.requests.all() {
			if _, ok := r.query["types[]"]; ok {
				t.Fatalf("request %d sent types[] = %v, want none", i, r.query["types[]"])
			}
		}
	})

	// An endpoint pinned to an API version is never sent an event the API
	// renders in another: catch-up skips it, naming both, and takes the
	// rest. One already stored stays known.
	t.Run("SkipsAnotherAPIVersion", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{APIVersion: "2024-06-20"})
		at := base.Add(-time.Hour)
		b.fake.addVersion("evt_same", "2024-06-20", at)
		b.fake.addVersion("evt_other", "2023-10-16", at)
		b.fake.addVersion("evt_unversioned", "", at)
		b.fake.addVersion("evt_live", "2023-10-16", at)
		if _, err := b.store.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_live", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		res := b.pass(t, PassOptions{})
		wantCounts(t, res, 4, 1, 1)
		if res.Skipped != 2 || !res.Advanced {
			t.Fatalf("skipped=%d advanced=%v, want 2 true", res.Skipped, res.Advanced)
		}
		for id, want := range map[string]error{"evt_same": nil, "evt_other": ferry.ErrNotFound, "evt_unversioned": ferry.ErrNotFound} {
			if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: id}); !errors.Is(err, want) {
				t.Errorf("%s: err = %v, want %v", id, err, want)
			}
		}
		if logs := b.logsText(); !strings.Contains(logs, `evt_other`) || !strings.Contains(logs, `API version \"2023-10-16\", the endpoint is sent \"2024-06-20\"`) {
			t.Errorf("the warning does not name the event and both versions:\n%s", logs)
		}
	})

	// Without api_version every version is taken.
	t.Run("TakesEveryAPIVersionByDefault", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.fake.addVersion("evt_a", "2024-06-20", base.Add(-time.Hour))
		b.fake.addVersion("evt_b", "2023-10-16", base.Add(-time.Hour))
		wantCounts(t, b.pass(t, PassOptions{}), 2, 2, 0)
	})

	t.Run("RejectsAPIVersion", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"2024-6-20", "june 2024", "2024-06-20.", "2024-06-20.Basil", " 2024-06-20"} {
			_, err := NewStripe(StripeOptions{APIKey: "sk_test_x", Types: []string{"*"}, APIVersion: v})
			var oe *OptionError
			if !errors.As(err, &oe) || oe.Option != "api_version" || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "2025-03-31.basil") {
				t.Errorf("%q: err = %v, want an api_version OptionError", v, err)
			}
		}
		for _, v := range []string{"2024-06-20", "2025-03-31.basil"} {
			if _, err := NewStripe(StripeOptions{APIKey: "sk_test_x", Types: []string{"*"}, APIVersion: v}); err != nil {
				t.Errorf("%q: %v", v, err)
			}
		}
	})

	t.Run("RejectsTypes", func(t *testing.T) {
		t.Parallel()
		for name, tc := range map[string]struct {
			types []string
			want  string
		}{
			"Missing":       {nil, "enabled_events"},
			"Empty":         {[]string{}, "enabled_events"},
			"StarWithOther": {[]string{"*", "invoice.paid"}, `write ["*"] alone`},
			"OtherWithStar": {[]string{"invoice.paid", "*"}, `write ["*"] alone`},
		} {
			_, err := NewStripe(StripeOptions{APIKey: "sk_test_x", Types: tc.types})
			var oe *OptionError
			if !errors.Is(err, ErrConfig) || !errors.As(err, &oe) || oe.Option != "types" || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want ErrConfig, a types OptionError and %q", name, err, tc.want)
			}
		}
		for _, types := range [][]string{{"*"}, slices.Repeat([]string{"invoice.paid"}, 20), slices.Repeat([]string{"invoice.paid"}, 45)} {
			if _, err := NewStripe(StripeOptions{APIKey: "sk_test_x", Types: types}); err != nil {
				t.Errorf("types %v: %v", types, err)
			}
		}
	})

	// Stripe takes at most 20 types[] a call: 45 types are listed in
	// groups of 20, 20 and 5, each paged, and the checkpoint moves past a
	// step only once every group of it is listed.
	t.Run("MoreThan20TypesAreListedInGroups", func(t *testing.T) {
		t.Parallel()
		types := make([]string, 45)
		for i := range types {
			types[i] = fmt.Sprintf("type.%02d", i)
		}
		b := setupStripe(t, StripeOptions{Types: types})
		b.runner.Lookback = time.Hour // one step
		for _, i := range []int{0, 19, 20, 44} {
			b.fake.addType(fmt.Sprintf("evt_t%02d", i), types[i], base.Add(-30*time.Minute))
		}
		b.fake.addType("evt_other", "customer.created", base.Add(-30*time.Minute))
		var broken atomic.Bool
		broken.Store(true)
		b.fake.fail = func(_ int, w http.ResponseWriter, r *http.Request) bool {
			if broken.Load() && slices.Contains(r.URL.Query()["types[]"], types[44]) {
				w.WriteHeader(http.StatusBadRequest) // not retried: the pass fails at once
				return true
			}
			return false
		}
		if _, err := b.runner.Pass(context.Background(), PassOptions{}); err == nil {
			t.Fatal("a pass whose last group of types fails succeeded")
		}
		if _, ok := checkpoint(t, b.store, "stripe"); ok {
			t.Fatal("the checkpoint moved past a step whose last group of types failed")
		}
		broken.Store(false)
		before := len(b.fake.requests.all())
		res := b.pass(t, PassOptions{})
		wantCounts(t, res, 4, 1, 3) // the first groups' events were received by the failed pass
		var sent [][]string
		for _, r := range b.fake.requests.all()[before:] {
			sent = append(sent, r.query["types[]"])
		}
		if want := [][]string{types[:20], types[20:40], types[40:]}; !slices.EqualFunc(sent, want, slices.Equal) {
			t.Fatalf("types[] sent %v, want the groups %v", sent, want)
		}
		if cp, ok := checkpoint(t, b.store, "stripe"); !ok || !cp.Equal(res.To) {
			t.Fatalf("checkpoint = %v, want the window's end %v", cp, res.To)
		}
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_other"}); !errors.Is(err, ferry.ErrNotFound) {
			t.Fatalf("an unlisted type was stored: err = %v", err)
		}
	})

	t.Run("KnownEventsAreLeftAlone", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		ids := b.fake.add(50, base.Add(-time.Hour), "a")
		for _, id := range ids[:40] {
			if _, err := b.store.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		wantCounts(t, b.pass(t, PassOptions{}), 50, 10, 40)
		ev, _ := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: ids[0]})
		if ev.Deliveries != 1 || ev.Origin != ferry.OriginDelivery {
			t.Fatalf("a known event: deliveries %d origin %q, want 1 and delivery (untouched)", ev.Deliveries, ev.Origin)
		}
	})

	// A 429 or a 5xx with Retry-After is sent again after the wait it names.
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(fmt.Sprint("RetryAfterOn", status), func(t *testing.T) {
			t.Parallel()
			b := setupStripe(t, StripeOptions{})
			b.runner.Lookback = time.Hour // one step: every request is a page
			b.fake.add(150, base.Add(-time.Hour), "a")
			b.fake.fail = func(n int, w http.ResponseWriter, r *http.Request) bool {
				if n != 2 {
					return false
				}
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(status)
				return true
			}
			wantCounts(t, b.pass(t, PassOptions{}), 150, 150, 0)
			reqs := b.fake.requests.all()
			if len(reqs) != 3 {
				t.Fatalf("%d requests, want 3 (page 1, %d, page 2 again)", len(reqs), status)
			}
			if gap := reqs[2].at.Sub(reqs[1].at); gap < time.Second {
				t.Fatalf("retried %s after the %d, want at least Retry-After's 1s", gap, status)
			}
		})
	}

	t.Run("ServerErrorHalfWayAdvancesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.runner.Lookback = time.Hour // one step: every request is a page
		b.fake.add(250, base.Add(-30*time.Minute), "a")
		broken := true
		b.fake.fail = func(n int, w http.ResponseWriter, r *http.Request) bool {
			if broken && r.URL.Query().Get("starting_after") != "" {
				w.WriteHeader(http.StatusInternalServerError)
				return true
			}
			return false
		}
		res, err := b.runner.Pass(context.Background(), PassOptions{})
		if err == nil {
			t.Fatal("a pass whose page 2 always fails succeeded")
		}
		if tries := len(b.fake.requests.all()) - 1; tries != maxTries {
			t.Errorf("page 2 was tried %d times, want %d (5xx is retried)", tries, maxTries)
		}
		if _, ok := checkpoint(t, b.store, "stripe"); ok {
			t.Fatal("the checkpoint advanced after a failed pass")
		}
		if res.New != 100 {
			t.Fatalf("new = %d before the failure, want page 1's 100", res.New)
		}
		broken = false
		b.now = b.now.Add(DefaultInterval)
		res = b.pass(t, PassOptions{})
		wantCounts(t, res, 250, 150, 100)
		if q := b.fake.requests.all()[len(b.fake.requests.all())-3].query.Get("created[gte]"); q != strconv.FormatInt(b.now.Add(-time.Hour).Unix(), 10) {
			t.Fatalf("the retry pass starts at %s, want now - lookback: no checkpoint was written", q)
		}
	})

	// Answers that repeat (a cache or proxy dropping starting_after) fail
	// the pass at the first repeated cursor: asking again would loop
	// until the pass's timeout, and forever in `ferry reconcile`.
	t.Run("RepeatedPageFailsThePass", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.runner.Lookback = time.Hour // one step: every request is a page
		b.fake.add(150, base.Add(-30*time.Minute), "a")
		b.fake.ignoreCursor = true
		b.wantRepeatedPageFails(t, "where an earlier page of this listing ended", func() int { return len(b.fake.requests.all()) })
	})

	// Stripe refuses a starting_after it does not know with 400
	// resource_missing; the fake does too, instead of serving page one
	// again, and the pass fails on it.
	t.Run("UnknownCursorIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.runner.Lookback = time.Hour
		ids := b.fake.add(150, base.Add(-30*time.Minute), "a")
		b.fake.fail = func(n int, _ http.ResponseWriter, _ *http.Request) bool {
			if n == 1 { // page one is served as it was; its last event is gone after
				b.fake.mu.Lock()
				b.fake.events = slices.DeleteFunc(b.fake.events, func(e stripeEvent) bool { return e.ID == ids[50] })
				b.fake.mu.Unlock()
			}
			return false
		}
		_, err := b.runner.Pass(context.Background(), PassOptions{})
		se, ok := errors.AsType[*StatusError](err)
		if !ok || se.Status != http.StatusBadRequest || !strings.Contains(se.Body, `"code":"resource_missing"`) || !strings.Contains(se.Body, ids[50]) {
			t.Fatalf("err = %v, want Stripe's 400 resource_missing naming %s", err, ids[50])
		}
		if _, ok := checkpoint(t, b.store, "stripe"); ok {
			t.Fatal("the checkpoint advanced past a window not listed")
		}
	})

	t.Run("OverlappingWindowsReceiveOnce", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.fake.add(20, base.Add(-time.Hour), "a")
		first := b.pass(t, PassOptions{})
		wantCounts(t, first, 20, 20, 0)
		// Events created in the overlap before the checkpoint, and after it.
		b.fake.add(5, first.To.Add(-5*time.Minute), "b")
		b.fake.add(7, first.To.Add(time.Minute), "c")
		b.now = b.now.Add(time.Hour)
		secondTo := b.now.Add(-DefaultSettle)
		b.fake.add(4, secondTo.Add(-3*time.Minute), "d") // will lie in the next overlap
		second := b.pass(t, PassOptions{})
		if !second.From.Equal(first.To.Add(-DefaultOverlap)) {
			t.Fatalf("second window starts %v, want the checkpoint minus the overlap %v", second.From, first.To.Add(-DefaultOverlap))
		}
		// The 5 created just before the first checkpoint were not listed by
		// the first pass (the provider listed them late); the overlap
		// catches them.
		wantCounts(t, second, 16, 16, 0)
		b.now = b.now.Add(time.Minute)
		third := b.pass(t, PassOptions{})
		wantCounts(t, third, 4, 0, 4)
		list, _ := b.store.EventList(context.Background(), &ferry.EventListParams{Limit: 1000})
		if len(list.Events) != 36 {
			t.Fatalf("%d events stored, want 36", len(list.Events))
		}
		for _, e := range list.Events {
			if e.Deliveries != 1 {
				t.Fatalf("%s has %d deliveries, want 1", e.EventID, e.Deliveries)
			}
		}
	})

	// An API error body is cut to its start: the key is scrubbed before
	// the cut, which would leave a part no scrub could match, and the cut
	// falls between characters.
	t.Run("ErrorBodyCutAfterScrubbing", func(t *testing.T) {
		t.Parallel()
		const key = "sk_live_51STRADDLINGkeyABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghij"
		for name, body := range map[string]func(*http.Request) string{
			"KeyAcrossTheCut":  func(r *http.Request) string { return strings.Repeat("x", 150) + r.Header.Get("Authorization") },
			"RuneAcrossTheCut": func(*http.Request) string { return "x" + strings.Repeat("é", 150) },
		} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprint(w, body(r))
			}))
			t.Cleanup(srv.Close)
			s, err := NewStripe(StripeOptions{APIKey: key, APIBase: srv.URL, Types: []string{"*"}})
			if err != nil {
				t.Fatal(err)
			}
			err = s.List(context.Background(), Window{From: base.Add(-time.Hour), To: base}, func(*Candidate) error { return nil })
			if err == nil || !strings.Contains(err.Error(), "403") {
				t.Fatalf("%s: err = %v, want the 403", name, err)
			}
			if strings.Contains(err.Error(), key[:8]) {
				t.Errorf("%s: the key's start is in the error: %v", name, err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Errorf("%s: the error is not UTF-8: %q", name, err)
			}
		}
	})

	t.Run("KeyNeverInErrorsOrLogs", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{APIKey: "sk_live_WRONGkey1234567890"})
		b.fake.add(3, base.Add(-time.Hour), "a")
		// The fake echoes the key it was given, as a careless API might.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.runner.Run(ctx, time.Hour, "test") }()
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && !strings.Contains(b.logsText(), "pass failed"); {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-done
		_, err := b.runner.Pass(context.Background(), PassOptions{})
		if err == nil {
			t.Fatal("a pass with a wrong key succeeded")
		}
		if !strings.Contains(err.Error(), "401") {
			t.Fatalf("error %v: want the 401 named", err)
		}
		if strings.Contains(err.Error(), "WRONGkey") {
			t.Fatalf("the key is in the error: %v", err)
		}
		if !strings.Contains(b.logsText(), "pass failed") {
			t.Fatalf("no failure logged:\n%s", b.logsText())
		}
		if strings.Contains(b.logsText(), "WRONGkey") {
			t.Fatalf("the key is in the logs:\n%s", b.logsText())
		}
	})
}
