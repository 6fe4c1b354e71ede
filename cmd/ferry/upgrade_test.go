package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
)

// upgradeSnapshot is every row an upgrade must keep, as JSON, in a stable
// order: events (wherever the layout keeps them), ledger, conflicts,
// replays, actions.
const upgradeSnapshotOld = `
SELECT (SELECT jsonb_agg(to_jsonb(e) ORDER BY e.id) FROM ferry_event e)::text,
       (SELECT jsonb_agg(to_jsonb(a) ORDER BY a.event_id, a.attempt) FROM ferry_attempt a)::text,
       (SELECT jsonb_agg(to_jsonb(c) ORDER BY c.id) FROM ferry_conflict c)::text,
       (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.id) FROM ferry_replay r)::text,
       (SELECT jsonb_agg(to_jsonb(x) ORDER BY x.id) FROM ferry_action x)::text`

const upgradeSnapshotNew = `
SELECT (SELECT jsonb_agg(to_jsonb(e) ORDER BY e.id)
        FROM (SELECT * FROM ferry_event UNION ALL SELECT * FROM ferry_event_done) e)::text,
       (SELECT jsonb_agg(to_jsonb(a) ORDER BY a.event_id, a.attempt)
        FROM (SELECT * FROM ferry_attempt
              UNION ALL
              SELECT event_id, attempt, worker, started_at, finished_at, outcome, error, http_status, response
              FROM ferry_attempt_done) a)::text,
       (SELECT jsonb_agg(to_jsonb(c) ORDER BY c.id) FROM ferry_conflict c)::text,
       (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.id) FROM ferry_replay r)::text,
       (SELECT jsonb_agg(to_jsonb(x) ORDER BY x.id) FROM ferry_action x)::text`

// An installation of the previous schema (the shipped migrations before
// 003, read from package postgres's own files and recorded as its Migrate
// records them), with an event in every state, is migrated by `ferry
// migrate`: every row survives unchanged, done events now in the archive;
// then `ferry serve` of this version works off what was pending or leased.
func TestUpgradeFromSchema002(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Schema(t)
	shipped := filepath.Join("..", "..", "postgres")
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if _, err := pool.Exec(ctx, read(filepath.Join(shipped, "query", "migration_table.sql"))); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(shipped, "migration", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	var previous []string
	for _, path := range files {
		base := strings.TrimSuffix(filepath.Base(path), ".sql")
		number, name, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(number)
		if err != nil {
			t.Fatalf("migration file %s: %v", path, err)
		}
		if version >= 3 {
			break
		}
		if _, err := pool.Exec(ctx, read(path)); err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		if _, err := pool.Exec(ctx, read(filepath.Join(shipped, "query", "migration_record.sql")), pgx.NamedArgs{"version": version, "name": name}); err != nil {
			t.Fatal(err)
		}
		previous = append(previous, base)
	}
	if !slices.Equal(previous, []string{"001_initial", "002_operations"}) {
		t.Fatalf("previous schema from %v; want 001_initial and 002_operations", previous)
	}
	if _, err := pool.Exec(ctx, read(filepath.Join("testdata", "upgrade", "postgres", "fill.sql"))); err != nil {
		t.Fatalf("fill.sql: %v", err)
	}
	snapshot := func(sql string) [5]string {
		var s [5]string
		if err := pool.QueryRow(ctx, sql).Scan(&s[0], &s[1], &s[2], &s[3], &s[4]); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot(upgradeSnapshotOld)

	_, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
	// Default lease: fill.sql's lease of evt_leased has expired already, and a
	// short one could lapse again under load, adding a lease_expired row.
	cfg := writeConfig(t, pgtest.ConnString(schema), appSrv.URL, "")

	out, stderr, code := runFerry(t, "migrate", "--config", cfg, "--dry-run")
	if code != 0 {
		t.Fatalf("migrate --dry-run exited %d: %s", code, stderr)
	}
	want := "7 events get a dedupe key; 2 done events move to 2 daily partitions of ferry_event_done, their 3 ledger rows to ferry_attempt_done's; 5 stay in ferry_event"
	if !strings.Contains(out, "003_archive: ") || !strings.Contains(out, want) {
		t.Fatalf("dry run says:\n%s\nwant 003_archive and %q", out, want)
	}
	if got := snapshot(upgradeSnapshotOld); got != before {
		t.Fatal("the dry run changed the store")
	}
	if !strings.Contains(out, "Exclusive: an older ferry's receipts fail") || !strings.Contains(out, "stop every older ferry first") {
		t.Errorf("dry run says:\n%s\nwant 003 marked as needing older instances stopped", out)
	}
	// serve, which migrates at start by default, leaves 003 to `ferry
	// migrate`: older instances may still be running on this store.
	{
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		var out strings.Builder
		serve := exec.CommandContext(ctx, ferryBin, "serve", "--config", cfg)
		serve.Stderr = &out
		_ = serve.Run()
		cancel()
		stderr, code := out.String(), serve.ProcessState.ExitCode()
		if code != exitUsage || !strings.Contains(stderr, "003_archive needs every older instance stopped") ||
			!strings.Contains(stderr, "then run `ferry migrate`") || strings.Contains(stderr, "ferry: serving") {
			t.Errorf("serve on schema 002: exit %d, stderr:\n%s\nwant %d and 003 left to ferry migrate", code, stderr, exitUsage)
		}
		if got := snapshot(upgradeSnapshotOld); got != before {
			t.Fatal("serve changed a store it refused to migrate")
		}
	}

	if _, stderr, code := runFerry(t, "migrate", "--config", cfg); code != 0 {
		t.Fatalf("migrate exited %d: %s", code, stderr)
	}
	after := snapshot(upgradeSnapshotNew)
	for i, what := range []string{"events", "ledger", "conflicts", "replays", "actions"} {
		if after[i] != before[i] {
			t.Errorf("%s changed by the upgrade:\nbefore %s\nafter  %s", what, before[i], after[i])
		}
	}
	var hotDone, archived int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ferry_event WHERE state = 'done'), (SELECT count(*) FROM ferry_event_done)`).Scan(&hotDone, &archived); err != nil {
		t.Fatal(err)
	}
	if hotDone != 0 || archived != 2 {
		t.Fatalf("after the upgrade: %d done events in ferry_event, %d archived; want 0 and 2", hotDone, archived)
	}
	var hotLedger, archivedLedger int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ferry_attempt a JOIN ferry_event_done d ON d.id = a.event_id),
		(SELECT count(*) FROM ferry_attempt_done a JOIN ferry_event_done d ON d.id = a.event_id AND d.completed_at = a.completed_at)`).Scan(&hotLedger, &archivedLedger); err != nil {
		t.Fatal(err)
	}
	if hotLedger != 0 || archivedLedger != 3 {
		t.Fatalf("after the upgrade: %d ledger rows of done events in ferry_attempt, %d beside their event in the archive; want 0 and 3", hotLedger, archivedLedger)
	}

	st := postgres.New(pool, nil)
	stats, err := st.EventStats(ctx, &ferry.EventStatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]map[ferry.State]int{}
	for _, s := range stats.Sources {
		counts[s.Source] = s.States
	}
	if c := counts["stripe"]; c[ferry.StateDone] != 2 || c[ferry.StatePending] != 2 || c[ferry.StateInProgress] != 1 {
		t.Errorf("stripe counts after the upgrade: %v", c)
	}
	if c := counts["github"]; c[ferry.StateDead] != 1 || c[ferry.StateUnknown] != 1 {
		t.Errorf("github counts after the upgrade: %v", c)
	}
	// A redelivery of an archived event is still a duplicate; so is a
	// delivery, with its own bytes, of one catch-up stored (evt_done_today).
	served := startServe(t, cfg)
	for _, id := range []string{"evt_done", "evt_done_today"} {
		if code := sendStripe(t, served.addr, id); code != http.StatusOK {
			t.Fatalf("redelivery of %s answered %d", id, code)
		}
	}
	waitFor(t, 60*time.Second, "the pending and leased events done", func() bool {
		for _, id := range []string{"evt_pending", "evt_retrying", "evt_leased"} {
			if eventState(t, st, id).State != ferry.StateDone {
				return false
			}
		}
		return true
	})
	if ev := eventState(t, st, "evt_done"); ev.State != ferry.StateDone || ev.Deliveries != 4 || ev.Attempt != 1 {
		t.Errorf("evt_done after a redelivery: state %s, deliveries %d, attempt %d; want done, 4, 1", ev.State, ev.Deliveries, ev.Attempt)
	}
	if ev := eventState(t, st, "evt_done_today"); ev.Deliveries != 2 || ev.Conflicts != 0 {
		t.Errorf("evt_done_today (caught up) after a delivery of other bytes: %d deliveries, %d conflicts; want 2, 0", ev.Deliveries, ev.Conflicts)
	}
	leased := eventState(t, st, "evt_leased")
	if got := outcomes(t, st, leased.ID); len(got) != 2 || got[0] != "lease_expired@old-worker" || !strings.HasPrefix(got[1], "done@") {
		t.Errorf("evt_leased ledger %v, want the old worker's lease_expired, then done", got)
	}
	for key, want := range map[[2]string]ferry.State{
		{"github", "gh_dead"}: ferry.StateDead, {"github", "gh_unknown"}: ferry.StateUnknown, {"stripe", "evt_done_today"}: ferry.StateDone,
	} {
		ev, err := st.EventGet(ctx, &ferry.EventGetParams{Source: key[0], EventID: key[1]})
		if err != nil || ev.State != want {
			t.Errorf("%s after serve: %+v, %v; want %s", key[1], ev, err, want)
		}
	}
}

// A binary rolled back after a newer one migrated the store refuses it
// (exit 2, saying what to run) rather than misread what that schema holds:
// serve, whether it migrates or not, migrate, with --dry-run or without,
// the events commands (a replay would write), and doctor, which reports it
// as needing a human.
func TestOlderBinaryRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ferry.db")
	cfg := writeConfig(t, "sqlite:"+path, "http://127.0.0.1:1/hooks", "")
	if _, stderr, code := runFerry(t, "migrate", "--config", cfg); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	st := teststore.OpenSQLite(t, path, nil)
	if _, err := st.DB().Exec(`INSERT INTO ferry_migration (version, name, applied_at) VALUES (999, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	const want = "schema newer than this build: the store has migration 999"
	if _, err := st.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"serve"}, {"serve", "--no-migrate"}, {"migrate"}, {"migrate", "--dry-run"}, {"events", "list"}, {"events", "replay", "--state", "dead", "--source", "stripe"}} {
		// A serve that starts is stopped after a while: it did not refuse.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var out strings.Builder
		cmd := exec.CommandContext(ctx, ferryBin, append(args, "--config", cfg)...)
		cmd.Stderr = &out
		_ = cmd.Run()
		cancel()
		stderr, code := out.String(), cmd.ProcessState.ExitCode()
		if code != exitUsage || !strings.Contains(stderr, want) || !strings.Contains(stderr, "run the ferry that migrated it") || strings.Contains(stderr, "ferry: serving") {
			t.Errorf("ferry %v on a newer schema: exit %d, stderr:\n%s\nwant %d and %q", args, code, stderr, exitUsage, want)
		}
	}
	r, code := doctorJSON(t, cfg)
	if code != exitProblems || r.Healthy || !hasFinding(r, "fail", want) {
		t.Errorf("doctor on a newer schema: exit %d, report %+v; want %d and a fail", code, r, exitProblems)
	}
}

// A command that works on the store refuses one whose schema lacks a
// migration (exit 2, naming ferry migrate) rather than fail on a table or
// column it does not have: an empty store may be a mistyped store.url, so
// that refusal names it too. migrate --dry-run lists what is pending.
func TestCommandsNeedACurrentSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	commands := [][]string{
		{"events", "list"},
		{"events", "show", "stripe", "evt_1"},
		{"events", "replay", "--state", "dead", "--source", "stripe"},
		{"events", "resolve", "stripe", "evt_1"},
		{"reconcile", "--source", "caught"}, // its API is never reached
	}
	// A source reconcile can run for.
	const caught = `[[source]]
name = "caught"
provider = "stripe"
secrets = ["whsec_caught"]
[source.catchup]
api_key = "sk_test_caught"
types = ["*"]
api_base = "http://127.0.0.1:9"
`
	refused := func(t *testing.T, cfg string, want ...string) {
		t.Helper()
		for _, args := range commands {
			_, stderr, code := runFerry(t, append(args, "--config", cfg)...)
			for _, w := range want {
				if code != exitUsage || !strings.Contains(stderr, w) {
					t.Errorf("ferry %s: exit %d, stderr %q; want %d and %q", strings.Join(args, " "), code, stderr, exitUsage, w)
				}
			}
		}
		if stdout, stderr, code := runFerry(t, "migrate", "--dry-run", "--config", cfg); code != 0 || !strings.Contains(stdout, "pending") {
			t.Errorf("migrate --dry-run: exit %d, stdout %q, stderr %q; want the pending migrations", code, stdout, stderr)
		}
	}
	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		refused(t, writeCLIConfig(t, pgtest.SchemaURL(t), caught), "store.url: the store has no ferry schema", "run `ferry migrate`")
	})
	// A schema behind by one migration: the fix is to run ferry migrate,
	// after stopping older instances when they cannot run beside it (003);
	// doctor warns with the same fix.
	for _, tc := range []struct {
		name    string
		version int
		lacks   string
		fix     string
	}{
		{"Behind", 6, "006_stats_due", "run `ferry migrate"},
		{"BehindAnExclusiveMigration", 3, "003_archive", "stop every older ferry first (003_archive: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, schema := pgtest.Schema(t)
			cfg := writeCLIConfig(t, pgtest.ConnString(schema), caught)
			if _, stderr, code := runFerry(t, "migrate", "--config", cfg); code != 0 {
				t.Fatalf("migrate: exit %d: %s", code, stderr)
			}
			if _, err := pool.Exec(ctx, `DELETE FROM ferry_migration WHERE version = $1`, tc.version); err != nil {
				t.Fatal(err)
			}
			lacks := "the store's schema lacks 1 migration(s) (" + tc.lacks + ")"
			refused(t, cfg, lacks+": "+tc.fix)
			r, _ := doctorJSON(t, cfg)
			if !hasFinding(r, "warn", lacks) || !slices.ContainsFunc(r.Findings, func(f finding) bool { return strings.HasPrefix(f.Fix, tc.fix) }) {
				t.Errorf("doctor: %+v; want a warning that the store lacks %s, fix %q", r.Findings, tc.lacks, tc.fix)
			}
		})
	}
}

// doctor beside a migration in progress warns, and still reads the store,
// rather than wait for the migration's lock past its own time and report
// an unreadable schema.
func TestDoctorBesideAMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Schema(t)
	cfg := writeConfig(t, pgtest.ConnString(schema), "http://127.0.0.1:1/hooks", "")
	if _, stderr, code := runFerry(t, "migrate", "--config", cfg); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Migrate's lock, as postgres/query/migration_lock.sql takes it.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))`, postgres.MigrationLockClass); err != nil {
		t.Fatal(err)
	}
	r, _ := doctorJSON(t, cfg)
	if !hasFinding(r, "warn", "a migration is in progress") || !hasFinding(r, "ok", "schema readable") || hasFinding(r, "fail", "store:") {
		t.Errorf("doctor beside a migration: report %+v; want a warning and the store read", r)
	}
}
