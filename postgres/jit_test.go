package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
)

// Open's sessions run with jit off, unless the URL sets jit. The case is a
// scale review's: a month of daily archive partitions and a thousand lapsed
// attempts in the archive's ledger, whose per-row probe of the archive the
// planner prices at every partition, so the stats query passed
// jit_above_cost and spent seconds JIT-compiling on every metrics scrape.
// The URL lowers every JIT threshold to 0, so any plan compiles where jit is
// on: the stats plan shows no JIT on Ferry's session, and shows it on one
// whose URL sets jit=on (where the server has a JIT compiler), which proves
// the check can see it. Where jit is on, the plan's cost decides how much is
// compiled: each archive probe counts once.
func TestOpenTurnsJITOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.SchemaURL(t) + "&jit_above_cost=0"
	open := func(url string) *postgres.Store {
		t.Helper()
		s, err := postgres.Open(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	s := open(url + "&jit_inline_above_cost=0&jit_optimize_above_cost=0")
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// Partitions from a month ago to a week ahead, as maintenance keeps
	// them; a thousand done events over that month, each with a lapsed
	// attempt in the archive's ledger.
	if _, err := s.ArchiveMaintain(ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 31 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `
		WITH d AS (
		    SELECT n, statement_timestamp() - (n % 30) * interval '1 day' AS at FROM generate_series(1, 1000) n
		), e AS (
		    INSERT INTO ferry_event_done (id, source, event_id, payload, payload_sha256, state, attempt,
		                                  next_attempt_at, first_delivered_at, last_delivered_at, completed_at)
		    SELECT n, 's', 'evt_' || n, '', '', 'done', 2, at, at, at, at FROM d
		)
		INSERT INTO ferry_attempt_done (event_id, attempt, worker, started_at, finished_at, outcome, completed_at)
		SELECT n, 1, 'w', at, at, 'lease_expired', at FROM d`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE ferry_event_done, ferry_attempt_done`); err != nil {
		t.Fatal(err)
	}
	var parts int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM ferry_event_done_partition`).Scan(&parts); err != nil || parts < 35 {
		t.Fatalf("%d archive partitions (%v), want a month's", parts, err)
	}

	if got := jit(t, s); got != "off" {
		t.Errorf("Open's session runs with jit %s, want off", got)
	}
	plan := statsPlan(t, s)
	if strings.Contains(plan, `"JIT"`) {
		t.Errorf("the stats query was JIT-compiled on Open's session:\n%s", plan)
	}
	// The planner prices each probe of the archive at every partition: the
	// plan probes it once for a lapsed attempt's source and once for a
	// replayed event, never twice for one row (which doubled its cost).
	if n := strings.Count(plan, `"Relation Name": "ferry_event_done_default"`); n != 2 {
		t.Errorf("the stats plan probes the archive %d times, want 2 (a lapsed attempt's source, a replayed event):\n%s", n, plan)
	}

	// Inlining and optimizing are left out here: they take seconds.
	on := open(url + "&jit=on&jit_inline_above_cost=-1&jit_optimize_above_cost=-1")
	if got := jit(t, on); got != "on" {
		t.Errorf("with jit=on in the URL, the session runs with jit %s", got)
	}
	var available bool
	if err := on.Pool().QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if !available {
		t.Log("the server has no JIT compiler: only the setting is checked")
	} else if plan := statsPlan(t, on); !strings.Contains(plan, `"JIT"`) {
		t.Errorf("with jit=on and every threshold 0, the stats plan shows no JIT: the check cannot see it:\n%s", plan)
	}
}

// jit is the jit setting of a session of s's pool.
func jit(t *testing.T, s *postgres.Store) string {
	t.Helper()
	var v string
	if err := s.Pool().QueryRow(context.Background(), `SHOW jit`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// statsPlan runs EventStats's aggregate under EXPLAIN ANALYZE on a session
// of s's pool and returns the plan as JSON, which has a "JIT" key when the
// query was compiled.
func statsPlan(t *testing.T, s *postgres.Store) string {
	t.Helper()
	var plan string
	err := s.Pool().QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON)\n"+postgres.EventStatsSQL,
		postgres.StatsArgs(s, &ferry.EventStatsParams{DefaultAtRiskAfter: time.Hour})).Scan(&plan)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// A URL sets a setting as a parameter (any case) or in options; a name that
// only begins with the setting's sets something else.
func TestSetsParam(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		params map[string]string
		name   string
		want   bool
	}{
		{map[string]string{"jit": "on"}, "jit", true},
		{map[string]string{"JIT": "on"}, "jit", true},
		{map[string]string{"options": "-c jit=on"}, "jit", true},
		{map[string]string{"options": "-c search_path=x -cjit=on"}, "jit", true},
		{map[string]string{"options": "--jit=on"}, "jit", true},
		{map[string]string{}, "jit", false},
		{map[string]string{"jit_above_cost": "0", "options": "-c jit_above_cost=0 -c search_path=jit"}, "jit", false},
		{map[string]string{"options": `-c default_transaction_isolation=repeatable\ read`}, "default_transaction_isolation", true},
		{map[string]string{"jit": "on"}, "default_transaction_isolation", false},
	} {
		if got := postgres.SetsParam(tc.params, tc.name); got != tc.want {
			t.Errorf("SetsParam(%v, %s) = %v, want %v", tc.params, tc.name, got, tc.want)
		}
	}
}
