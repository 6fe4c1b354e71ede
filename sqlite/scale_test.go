package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/sqlite"
)

// seedDone writes n done events of source "old", each with one ledger row,
// completed a day before the store's clock.
func seedDone(t *testing.T, b *testBundle, n int) { seedDoneOf(t, b, "old", n) }

// seedDoneOf inserts n done events of source, completed a day ago.
func seedDoneOf(t *testing.T, b *testBundle, source string, n int) {
	t.Helper()
	completed := b.clock.Now().Add(-24 * time.Hour).UnixMicro()
	_, err := b.store.DB().ExecContext(t.Context(), `
		WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < ?1)
		INSERT INTO ferry_event (source, event_id, payload, payload_sha256, state, attempt,
		                         next_attempt_at, first_delivered_at, last_delivered_at, completed_at)
		SELECT ?3, 'evt_' || n, randomblob(1024), randomblob(32), 'done', 1, ?2, ?2, ?2, ?2 FROM seq`, n, completed, source)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.DB().ExecContext(t.Context(), `
		INSERT INTO ferry_attempt (event_id, attempt, worker, started_at, finished_at, outcome)
		SELECT id, 1, 'w', completed_at, completed_at, 'done' FROM ferry_event WHERE source = ?1`, source); err != nil {
		t.Fatal(err)
	}
}

// A purge of many done events commits in batches: other writers commit
// between them, so receipts keep flowing while it runs.
func TestPurgeInBatchesLetsReceiptsThrough(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const total = 20 * sqlite.PurgeBatch
	seedDone(t, b, total)

	done := make(chan struct{})
	var (
		purged   int
		purgeErr error
	)
	go func() {
		defer close(done)
		purged, purgeErr = b.store.EventPurge(t.Context(), &ferry.EventPurgeParams{Source: "old", Retention: time.Hour, ReplayWindow: time.Hour})
	}()
	// Receipts during the purge, each timed; and the purge's progress as
	// a reader sees it.
	var (
		latencies []time.Duration
		during    int // receipts committed while the purge still ran
		partial   bool
		mu        sync.Mutex
	)
	for i := 0; ; i++ {
		start := time.Now()
		if _, err := b.store.EventReceive(t.Context(), &ferry.EventReceiveParams{Source: "new", EventID: fmt.Sprint("evt_", i), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		latencies = append(latencies, time.Since(start))
		mu.Unlock()
		var left int
		if err := b.store.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM ferry_event WHERE source = 'old'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		default:
			during++
			partial = partial || (left > 0 && left < total)
			continue
		}
		break
	}
	if purgeErr != nil || purged != total {
		t.Fatalf("purge = %d, %v; want %d", purged, purgeErr, total)
	}
	if !partial || during == 0 {
		t.Fatalf("no receipt committed between purge batches (%d during the purge, partial progress seen: %v): the purge held the write lock throughout", during, partial)
	}
	var ledger int
	if err := b.store.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM ferry_attempt`).Scan(&ledger); err != nil || ledger != 0 {
		t.Fatalf("ledger rows left: %d, %v", ledger, err)
	}
	slices.Sort(latencies)
	t.Logf("%d receipts during a purge of %d events: p50 %v, p99 %v, max %v", len(latencies), total,
		latencies[len(latencies)/2], latencies[len(latencies)*99/100], latencies[len(latencies)-1])
}

// A long maintenance purge renews its lease every renewEvery batches (100
// in ArchiveMaintain), counted across sources, and stops at the first
// renewal that fails. Three sources of three batches each (500, 500, 0)
// never reach four batches alone.
func TestMaintenanceRenewsTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const renewEvery = 4
	for _, source := range []string{"a", "b", "c"} {
		seedDoneOf(t, b, source, 2*sqlite.PurgeBatch)
	}
	lost := errors.New("lease lost")
	renewals := 0
	var res ferry.ArchiveMaintainResult
	err := sqlite.ArchiveRun(b.store, renewEvery)(t.Context(), &ferry.ArchiveMaintainParams{Retention: time.Hour}, &res, func() error {
		if renewals++; renewals == 2 {
			return lost
		}
		return nil
	})
	// Batches 1–7 run (a: 3, b: 3, c: 1); the renewal before the 8th fails.
	if want := 5 * sqlite.PurgeBatch; !errors.Is(err, lost) || renewals != 2 || res.Events != want {
		t.Fatalf("maintenance = %d events, %d renewals, %v; want %d events, then the second renewal's error", res.Events, renewals, err, want)
	}
}

// The claim's plan reads the partial indexes of pending and in_progress
// events, in due order, never the table nor every pending row: done history
// and a backlog do not slow it, with statistics (ANALYZE) or without, as a
// store runs. Pending events are searched by source, so one source's
// backlog is not read by the claims of another.
func TestClaimPlanIgnoresHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedDone(t, b, 2000)
	withAndWithoutStats(t, b, wantClaimPlan)
}

func wantClaimPlan(t *testing.T, b *testBundle, when string) {
	t.Helper()
	for _, sources := range []string{`[]`, `["s1"]`} {
		plan := queryPlan(t, b, sqlite.ClaimDueSQL(),
			sql.Named("now", 0), sql.Named("sources", sources), sql.Named("limit", 10), sql.Named("max_bytes", 0))
		text := strings.Join(plan, "\n")
		for _, index := range []string{"ferry_event_pending_due_source (source=? AND next_attempt_at<?)", "ferry_event_lease_expiry"} {
			if !strings.Contains(text, index) {
				t.Errorf("%s, sources %s: the claim plan does not use %s:\n%s", when, sources, index, text)
			}
		}
		for _, line := range plan {
			if strings.HasPrefix(line, "SCAN ferry_event") && !strings.Contains(line, "INDEX") {
				t.Errorf("%s, sources %s: the claim plan scans the table: %s", when, sources, line)
			}
		}
	}
}

// The stats aggregate reads the events that are not done, through
// ferry_event_state_id, and only counts the done ones, in their partial
// index: reading every event (it walked ferry_event_source_id, a row lookup
// each) took 1.5 s and more at a million events, past a metrics scrape's 5 s
// at a few million. With statistics or without.
func TestStatsPlanReadsWhatIsLive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedDone(t, b, 2000)
	b.receive(t, "new", "a")
	withAndWithoutStats(t, b, wantStatsPlan)
}

func wantStatsPlan(t *testing.T, b *testBundle, when string) {
	t.Helper()
	plan := queryPlan(t, b, sqlite.EventStatsSQL,
		sql.Named("now", 0), sql.Named("risk", "{}"), sql.Named("default_risk_us", 0))
	text := strings.Join(plan, "\n")
	for _, want := range []string{
		"SEARCH e USING INDEX ferry_event_state_id (state=?)",
		"SCAN ferry_event USING COVERING INDEX ferry_event_done_completed",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("%s, the stats plan lacks %q:\n%s", when, want, text)
		}
	}
	for _, line := range plan {
		if (line == "SCAN e" || strings.HasPrefix(line, "SCAN e ") || strings.HasPrefix(line, "SCAN ferry_event")) &&
			!strings.Contains(line, "ferry_event_done_completed") {
			t.Errorf("%s, the stats plan reads every event: %s\n%s", when, line, text)
		}
	}
}

// A list of the events with a lapsed attempt reads those attempts through
// their partial index and looks each event up by id, in id order: never a
// read of the events until a page of them matches, which at a few lapsed
// attempts among millions of events is all of them. With statistics or
// without.
func TestListPlanLooksLapsedAttemptsUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedDone(t, b, 2000)
	if _, err := b.store.DB().ExecContext(t.Context(),
		`UPDATE ferry_attempt SET outcome = 'lease_expired' WHERE event_id % 100 = 0`); err != nil {
		t.Fatal(err)
	}
	withAndWithoutStats(t, b, wantLapsedListPlan)
}

func wantLapsedListPlan(t *testing.T, b *testBundle, when string) {
	t.Helper()
	for _, p := range []struct {
		name   string
		params ferry.EventListParams
	}{
		{"newest first", ferry.EventListParams{}},
		{"of a source", ferry.EventListParams{Source: "old", Before: 1500}},
		{"paging up", ferry.EventListParams{After: 5}},
	} {
		p.params.LapsedAttempts = true
		query, args := sqlite.EventListQuery(&p.params)
		plan := queryPlan(t, b, query, args...)
		text := strings.Join(plan, "\n")
		// By rowid, or by (source, id) with the id given.
		lookup := regexp.MustCompile(`(?m)^SEARCH ferry_event USING .*\b(rowid|id)=\?`)
		if !lookup.MatchString(text) || !strings.Contains(text, "ferry_attempt_lease_expired") || strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%s, %s: the plan does not look the lapsed attempts' events up, in order:\n%s", when, p.name, text)
		}
	}
}

// withAndWithoutStats checks a plan as a store runs, without statistics,
// then after ANALYZE (which a store never runs, but an operator may).
func withAndWithoutStats(t *testing.T, b *testBundle, want func(t *testing.T, b *testBundle, when string)) {
	t.Helper()
	want(t, b, "without statistics")
	if _, err := b.store.DB().ExecContext(t.Context(), `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	want(t, b, "after ANALYZE")
}

// queryPlan is the detail column of EXPLAIN QUERY PLAN of query.
func queryPlan(t *testing.T, b *testBundle, query string, args ...any) []string {
	t.Helper()
	rows, err := b.store.DB().QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// The claim tells whether each claimed event's last attempt that ran never
// ended by a probe of the ledger's primary key, newest attempt first: never
// a scan of the ledger nor a sort of an event's attempts. With statistics or
// without.
func TestClaimPreviousPlanProbesTheLedger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedDone(t, b, 2000)
	withAndWithoutStats(t, b, wantClaimPreviousPlan)
}

func wantClaimPreviousPlan(t *testing.T, b *testBundle, when string) {
	t.Helper()
	plan := queryPlan(t, b, sqlite.ClaimPreviousSQL, sql.Named("ids", "[1,2,3]"))
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "SEARCH a USING INDEX sqlite_autoindex_ferry_attempt_1 (event_id=?)") {
		t.Errorf("%s, the plan does not probe the ledger's primary key:\n%s", when, text)
	}
	for _, line := range plan {
		if strings.HasPrefix(line, "SCAN a") || strings.Contains(line, "TEMP B-TREE") {
			t.Errorf("%s, the plan reads or sorts the ledger: %s\n%s", when, line, text)
		}
	}
}
