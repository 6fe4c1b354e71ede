package prometheus_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/prometheus"
	"github.com/ferry-inbox/ferry/provider"
)

const secret, oldSecret = "whsec_metrics_test", "whsec_metrics_old"

// TestScriptedRun drives a real receiver and a real client against a SQLite
// store, then reads /metrics from a real server and checks every series.
func TestScriptedRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, clock := teststore.SQLiteOnClock(t)

	reg := prom.NewRegistry()
	sources := []string{"stripe", "github"}
	metrics := prometheus.NewMetrics(reg, sources)
	metrics.StartSecrets("github", 2)
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{
		Store:   store,
		Params:  ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{"stripe": 60 * time.Hour, "github": 60 * time.Hour}},
		Sources: sources,
		// No cache: the test reads twice and wants fresh values.
		CacheTTL: time.Nanosecond,
	}))

	verifier, err := provider.NewStripe(provider.Options{Secrets: []string{secret, oldSecret}})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	receiver, err := ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{
		Store: store, Sources: []ferryhttp.Source{{Name: "stripe", Verifier: verifier}},
		Observer: metrics, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	receiver.Register(mux)
	mux.Handle("GET /metrics", prometheus.Handler(reg))
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)

	post := func(path string, header http.Header, body string) int {
		t.Helper()
		req := ferrytest.NewRequest(server.URL+path, header, []byte(body))
		req.RequestURI = ""
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	send := func(id, body string) int {
		signer := secret
		if id == "evt_dead" {
			signer = oldSecret // the sender still signs some with the old one
		}
		return post("/webhooks/stripe", ferrytest.SignStripe(signer, []byte(body), time.Now()), body)
	}
	for _, id := range []string{"evt_ok", "evt_retry", "evt_dead"} {
		if code := send(id, `{"id":"`+id+`","type":"t"}`); code != http.StatusOK {
			t.Fatalf("deliver %s: status %d", id, code)
		}
	}
	send("evt_ok", `{"id":"evt_ok","type":"t"}`)                // duplicate
	send("evt_ok", `{"id":"evt_ok","type":"t","changed":true}`) // conflict
	post("/webhooks/stripe", ferrytest.SignStripe("whsec_wrong", []byte(`{"id":"evt_x"}`), time.Now()), `{"id":"evt_x"}`)
	post("/webhooks/probe-"+fmt.Sprint(time.Now().UnixNano()), nil, `{}`) // unknown source

	client, err := ferry.NewClient(&ferry.Config{Store: store, Observer: metrics, Logger: quiet, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	client.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
		switch d.Event.EventID {
		case "evt_retry":
			// Retry an hour later by the store clock, which the test holds
			// still: exactly one attempt.
			return ferry.RetryAfter(errors.New("downstream 502"), time.Hour)
		case "evt_dead":
			return ferry.Permanent(errors.New("unknown customer"))
		}
		return nil
	})
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		s, err := store.EventStats(ctx, &ferry.EventStatsParams{})
		return err == nil && len(s.Sources) == 1 &&
			s.Sources[0].States[ferry.StateDone] == 1 && s.Sources[0].States[ferry.StateDead] == 1 &&
			s.Sources[0].States[ferry.StatePending] == 1
	})
	if err := client.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// Push the pending event past stripe's at-risk age (60h).
	clock.Advance(61 * time.Hour)

	// A body-only-signed source whose body comes back under a new id: one
	// suspected replay, kept in the store.
	for _, id := range []string{"shop_1", "shop_forged"} {
		if _, err := store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "shopify", EventID: id, Payload: []byte(`{"order":1}`), ReplayWindow: 72 * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}

	got := scrape(t, server.URL+"/metrics")
	want := map[string]float64{
		`ferry_received_total{outcome="accepted",reason="",source="stripe"}`:               3,
		`ferry_received_total{outcome="duplicate",reason="",source="stripe"}`:              1,
		`ferry_received_total{outcome="conflict",reason="",source="stripe"}`:               1,
		`ferry_received_total{outcome="rejected",reason="bad_signature",source="stripe"}`:  1,
		`ferry_received_total{outcome="rejected",reason="unknown_source",source="_other"}`: 1,
		`ferry_received_total{outcome="accepted",reason="",source="github"}`:               0,
		`ferry_received_total{outcome="replay",reason="",source="github"}`:                 0, // increase() sees the first
		`ferry_receive_duration_seconds_count{source="stripe"}`:                            6,
		`ferry_verified_total{secret="0",source="stripe"}`:                                 4, // not the forgery
		`ferry_verified_total{secret="1",source="stripe"}`:                                 1,
		`ferry_verified_total{secret="0",source="github"}`:                                 0,
		`ferry_verified_total{secret="1",source="github"}`:                                 0, // increase() sees the first
		`ferry_claimed_total{source="stripe"}`:                                             3,
		`ferry_completed_total{source="stripe"}`:                                           1,
		`ferry_failed_total{source="stripe"}`:                                              1,
		`ferry_dead_total{source="stripe"}`:                                                1,
		`ferry_lease_lost_total{source="stripe"}`:                                          0,
		`ferry_reclaimed_total{source="stripe"}`:                                           0,
		`ferry_handler_duration_seconds_count{outcome="done",source="stripe"}`:             1,
		`ferry_handler_duration_seconds_count{outcome="failed",source="stripe"}`:           1,
		`ferry_handler_duration_seconds_count{outcome="dead",source="stripe"}`:             1,
		`ferry_events{source="stripe",state="done"}`:                                       1,
		`ferry_events{source="stripe",state="dead"}`:                                       1,
		`ferry_events{source="stripe",state="pending"}`:                                    1,
		`ferry_events{source="stripe",state="in_progress"}`:                                0,
		`ferry_events{source="stripe",state="unknown"}`:                                    0,
		`ferry_events{source="github",state="pending"}`:                                    0,
		`ferry_oldest_pending_age_seconds{source="stripe"}`:                                (61 * time.Hour).Seconds(),
		`ferry_oldest_due_age_seconds{source="stripe"}`:                                    (60 * time.Hour).Seconds(), // evt_retry, due an hour after its attempt
		`ferry_oldest_due_age_seconds{source="github"}`:                                    0,
		`ferry_oldest_in_progress_age_seconds{source="stripe"}`:                            0,
		`ferry_events_lease_expired{source="stripe"}`:                                      0,
		`ferry_attempts_unfinished{source="stripe"}`:                                       0,
		`ferry_events_at_risk{source="stripe"}`:                                            1,
		`ferry_events_at_risk{source="github"}`:                                            0,
		`ferry_oldest_at_risk_age_seconds{source="stripe"}`:                                (61 * time.Hour).Seconds(),
		`ferry_replays_suspected{source="shopify"}`:                                        1,
		`ferry_replays_suspected{source="stripe"}`:                                         0,
		`ferry_stats_up`:       1,
		`ferry_store_writable`: 1,
	}
	// Created at zero, so rate() and increase() see a process's first.
	for _, series := range []string{
		`ferry_received_total{outcome="rejected",reason="bad_signature",source="github"}`,
		`ferry_received_total{outcome="unavailable",reason="store_unavailable",source="github"}`,
		`ferry_received_total{outcome="unavailable",reason="store_timeout",source="stripe"}`,
	} {
		want[series] = 0
	}
	for series, v := range want {
		g, ok := got[series]
		if !ok {
			t.Errorf("%s: missing from /metrics", series)
			continue
		}
		if g != v {
			t.Errorf("%s = %v, want %v", series, g, v)
		}
	}
	for series := range got {
		if strings.Contains(series, "probe-") {
			t.Errorf("%s: an unknown source name became a label", series)
		}
	}
	// SQLite has no partitions: no reach to fall short, so
	// FerryArchiveMaintenanceStopped has nothing to fire on.
	if v, ok := got["ferry_archive_ahead_seconds"]; ok {
		t.Errorf("ferry_archive_ahead_seconds = %v on SQLite, want it absent", v)
	}
}

// TestStatsDown exports ferry_stats_up 0 and ferry_store_writable 0, and no
// stale gauges, when the store cannot be read.
func TestStatsDown(t *testing.T) {
	t.Parallel()
	store := teststore.SQLite(t, nil)
	store.Close() // every read now fails
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: store, Sources: []string{"stripe"}}))
	server := httptest.NewServer(prometheus.Handler(reg))
	t.Cleanup(server.Close)
	got := scrape(t, server.URL)
	if got["ferry_stats_up"] != 0 || got["ferry_store_writable"] != 0 || len(got) != 2 {
		t.Errorf("closed store: got %v, want only ferry_stats_up 0 and ferry_store_writable 0", got)
	}
}

// A store that reads but cannot write (a standby after failover) exports
// ferry_store_writable 0: once /readyz takes every instance out of the load
// balancer, no 503 is counted, and this gauge is what alerts.
func TestStoreWritable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ferry.db")
	teststore.SQLiteAt(t, path, nil)
	store := teststore.OpenSQLite(t, "file:"+path+"?mode=ro", nil)
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: store, Sources: []string{"stripe"}}))
	server := httptest.NewServer(prometheus.Handler(reg))
	t.Cleanup(server.Close)
	got := scrape(t, server.URL)
	if got["ferry_stats_up"] != 1 || got["ferry_store_writable"] != 0 {
		t.Errorf("read-only store: stats_up %v, store_writable %v; want 1 and 0", got["ferry_stats_up"], got["ferry_store_writable"])
	}
}

// So does a PostgreSQL store whose role may read Ferry's tables but not
// write them (Ping: ferry.ErrMisconfigured): /readyz fails on every
// instance, as for a standby.
func TestStoreWritableWithoutGrants(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Schema(t)
	teststore.PostgresOn(t, pool, nil)
	storeURL, _ := pgtest.ReaderRole(t, schema, "metrics")
	store, err := postgres.Open(context.Background(), storeURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: store, Sources: []string{"stripe"}}))
	server := httptest.NewServer(prometheus.Handler(reg))
	t.Cleanup(server.Close)
	if got := scrape(t, server.URL); got["ferry_stats_up"] != 1 || got["ferry_store_writable"] != 0 {
		t.Errorf("role without GRANTs: stats_up %v, store_writable %v; want 1 and 0", got["ferry_stats_up"], got["ferry_store_writable"])
	}
}

// slowPing is a real store whose Ping runs out of time: a store that reads
// fine and is slow to take the write check.
type slowPing struct{ ferry.Store }

func (slowPing) Ping(context.Context) error { return context.DeadlineExceeded }

// A Ping that only timed out, beside a stats read that worked, is no
// "cannot write": the gauge stays 1 and nothing pages.
func TestStoreWritableOnASlowPing(t *testing.T) {
	t.Parallel()
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: slowPing{teststore.SQLite(t, nil)}, Sources: []string{"stripe"}}))
	server := httptest.NewServer(prometheus.Handler(reg))
	t.Cleanup(server.Close)
	if got := scrape(t, server.URL); got["ferry_stats_up"] != 1 || got["ferry_store_writable"] != 1 {
		t.Errorf("slow Ping: stats_up %v, store_writable %v; want 1 and 1", got["ferry_stats_up"], got["ferry_store_writable"])
	}
}

// hungStore is a real store that stops answering: its stats read and its
// Ping wait for their deadline. overlapped records whether one began while
// the other still waited.
type hungStore struct {
	ferry.Store
	inStats, inPing, overlapped atomic.Bool
}

func (s *hungStore) EventStats(ctx context.Context, _ *ferry.EventStatsParams) (*ferry.EventStats, error) {
	return nil, s.hang(ctx, &s.inStats, &s.inPing)
}

func (s *hungStore) Ping(ctx context.Context) error { return s.hang(ctx, &s.inPing, &s.inStats) }

func (s *hungStore) hang(ctx context.Context, self, other *atomic.Bool) error {
	self.Store(true)
	defer self.Store(false)
	if other.Load() {
		s.overlapped.Store(true)
	}
	<-ctx.Done()
	return ctx.Err()
}

// A store that hangs is answered within one Timeout: the write check runs
// beside the stats read, not after it, so the scrape ends inside
// Prometheus's own timeout with ferry_stats_up 0 and ferry_store_writable 0
// instead of the target going stale.
func TestStatsOfAHungStore(t *testing.T) {
	t.Parallel()
	store := &hungStore{Store: teststore.SQLite(t, nil)}
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: store, Sources: []string{"stripe"}, Timeout: time.Second}))
	server := httptest.NewServer(prometheus.Handler(reg))
	t.Cleanup(server.Close)
	got := scrape(t, server.URL)
	if got["ferry_stats_up"] != 0 || got["ferry_store_writable"] != 0 {
		t.Errorf("hung store: stats_up %v, store_writable %v; want 0 and 0", got["ferry_stats_up"], got["ferry_store_writable"])
	}
	if !store.overlapped.Load() {
		t.Error("the write check waited for the stats read: a hung store takes two timeouts")
	}
}

// deafPing is a real store whose Ping ignores its deadline and returns
// only when the test ends.
type deafPing struct {
	ferry.Store
	done <-chan struct{}
}

func (s deafPing) Ping(context.Context) error { <-s.done; return nil }

// A Ping that ignores its deadline does not hold the scrape: it is
// answered once the read's Timeout passes, the store counted as not
// answering the write check.
func TestStatsOfADeafPing(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: deafPing{teststore.SQLite(t, nil), done}, Sources: []string{"stripe"}, Timeout: time.Second}))
	server := httptest.NewServer(prometheus.Handler(reg))
	t.Cleanup(server.Close)
	t.Cleanup(func() { close(done) })                 // first: the server's Close waits for its handlers
	client := &http.Client{Timeout: 30 * time.Second} // a ceiling only a scrape waiting for the Ping reaches
	resp, err := client.Get(server.URL)
	if err != nil {
		t.Fatalf("the scrape waited for a Ping that ignores its deadline: %v", err)
	}
	resp.Body.Close()
	if got := scrape(t, server.URL); got["ferry_stats_up"] != 1 {
		t.Errorf("stats_up %v, want 1: the stats read worked", got["ferry_stats_up"])
	}
}

// scrape reads a text exposition into series → value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	code, body := testhttp.Get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err != nil {
			t.Fatalf("unparsable line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// waitFor polls cond until it holds; the test's own deadline bounds it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Context().Err() != nil {
			t.Fatal("condition never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countedStats is a real store that counts its EventStats reads and keeps
// the last AtRiskLimit asked for.
type countedStats struct {
	ferry.Store
	reads       atomic.Int64
	atRiskLimit atomic.Int64
}

func (s *countedStats) EventStats(ctx context.Context, p *ferry.EventStatsParams) (*ferry.EventStats, error) {
	s.reads.Add(1)
	s.atRiskLimit.Store(int64(p.AtRiskLimit))
	return s.Store.EventStats(ctx, p)
}

// statsServer serves /metrics of a registry holding only a stats collector
// with opts, and returns its URL.
func statsServer(t *testing.T, opts prometheus.StatsOptions) string {
	t.Helper()
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(opts))
	server := httptest.NewServer(prometheus.Handler(reg))
	t.Cleanup(server.Close)
	return server.URL
}

// The collector exports counts, never the list: it reads the stats with
// AtRiskLimit 0, whatever its Params say, so a scrape never pays the
// at-risk events' scan.
func TestStatsReadListsNoEvents(t *testing.T) {
	t.Parallel()
	store := &countedStats{Store: teststore.SQLite(t, nil)}
	scrape(t, statsServer(t, prometheus.StatsOptions{
		Store: store, Sources: []string{"stripe"},
		Params: ferry.EventStatsParams{DefaultAtRiskAfter: time.Hour, AtRiskLimit: 50},
	}))
	if n, limit := store.reads.Load(), store.atRiskLimit.Load(); n != 1 || limit != 0 {
		t.Errorf("%d store reads with AtRiskLimit %d, want 1 with 0", n, limit)
	}
}

// An age is never negative: an event stamped after the stats' clock (the
// database clock stepped back) is 0 seconds old, not -60.
func TestStatsAgesNeverNegative(t *testing.T) {
	t.Parallel()
	store, clock := teststore.SQLiteOnClock(t)
	if _, err := store.EventReceive(context.Background(), &ferry.EventReceiveParams{
		Source: "stripe", EventID: "evt_1", Type: "t", Payload: []byte(`{}`),
	}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(-time.Minute)
	got := scrape(t, statsServer(t, prometheus.StatsOptions{Store: store, Sources: []string{"stripe"}}))
	key := `ferry_oldest_pending_age_seconds{source="stripe"}`
	if v, ok := got[key]; !ok || v != 0 {
		t.Errorf("%s = %v (present %v), want 0", key, v, ok)
	}
}

// Scrapes within CacheTTL of a read are answered from it, by the
// collector's clock; the first scrape past it reads the store again.
func TestStatsCacheAnswersWithinItsTTL(t *testing.T) {
	t.Parallel()
	store := &countedStats{Store: teststore.SQLite(t, nil)}
	var mu sync.Mutex
	clock := time.Unix(1_700_000_000, 0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: store, Sources: []string{"stripe"}, CacheTTL: 10 * time.Second, Now: now}))
	server := httptest.NewServer(prometheus.Handler(reg))
	t.Cleanup(server.Close)
	for i, step := range []struct {
		advance time.Duration
		reads   int64
	}{{0, 1}, {9 * time.Second, 1}, {time.Second, 2}, {0, 2}} {
		mu.Lock()
		clock = clock.Add(step.advance)
		mu.Unlock()
		scrape(t, server.URL)
		if got := store.reads.Load(); got != step.reads {
			t.Errorf("scrape %d (+%v): %d store reads, want %d", i+1, step.advance, got, step.reads)
		}
	}
}

// Scrapes at once (two Prometheus servers, a scrape and ferry doctor) each
// export one read whole: a read for one never changes what another is
// exporting (the race detector catches a shared field read unlocked).
func TestStatsConcurrentScrapes(t *testing.T) {
	t.Parallel()
	store := teststore.SQLite(t, nil)
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{
		Store: store, Sources: []string{"stripe"}, CatchupSources: []string{"stripe"}, CacheTTL: time.Nanosecond,
	}))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				if _, err := reg.Gather(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
