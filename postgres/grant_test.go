package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
)

// A role that may use the schema and nothing in it fails Ping with
// ErrMisconfigured, naming what it lacks and the GRANTs: /readyz and doctor
// passed such a role while every delivery got 503. The GRANTs it prints,
// run as printed by the owner in a session of another search_path, are
// all the role is given: with them it plans and runs a migration with
// nothing to do (serve's at every start, which needs no CREATE on the
// schema), reads the archive for /metrics, and does every other thing a
// Store does but migrate and maintain the archive.
func TestPingNamesAMissingGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, schema, role := asRole(t, "grant", usageOnly)
	// Not Ferry's: a table of the app's beside them, and archive
	// partitions, attached and detached, written through their parents.
	for _, sql := range []string{
		`CREATE TABLE ferry_reports_daily (day date)`,
		`CREATE TABLE ferry_event_done_20990101 PARTITION OF ferry_event_done FOR VALUES FROM ('2099-01-01') TO ('2099-01-02')`,
		`CREATE TABLE ferry_event_done_20990102 (LIKE ferry_event_done)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: "refused", Payload: []byte(`{}`)}); err == nil {
		t.Fatal("EventReceive as a role with no GRANT succeeded: the test grants too much")
	}
	err := s.Ping(ctx)
	if !errors.Is(err, ferry.ErrMisconfigured) || !strings.Contains(err.Error(), "the role "+role+" lacks SELECT on ferry_event, INSERT on ferry_event, UPDATE on ferry_event, DELETE on ferry_event, USAGE on ferry_event_id_seq, ") ||
		!strings.Contains(err.Error(), "SELECT on ferry_migration, SELECT on ferry_event_done_partition") {
		t.Fatalf("Ping as a role with no GRANT = %v, want ErrMisconfigured naming what it lacks", err)
	}
	// Not what only a migration or the archive's maintenance does; not
	// UPDATE where no statement updates; not what is not Ferry's.
	for _, wrong := range []string{"INSERT on ferry_migration", "INSERT on ferry_event_done_partition", "_default", "2099", "ferry_reports_daily", "UPDATE on ferry_action", "DELETE on ferry_checkpoint", "EXECUTE"} {
		if strings.Contains(err.Error(), wrong) {
			t.Errorf("Ping names %q: %v", wrong, err)
		}
	}
	_, grants, ok := strings.Cut(err.Error(), "run ferry as the role that owns its tables (workers must: they maintain the archive's partitions, which only the owner may), or, for receivers, ")
	if !ok || !strings.HasPrefix(grants, "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "+schema+".ferry_event TO "+role+"; GRANT USAGE ON SEQUENCE ") {
		t.Fatalf("Ping's GRANTs = %q", grants)
	}
	asOwner(t, grants)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after %s = %v, want nil", grants, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate of an up-to-date schema as a role without CREATE: %v", err)
	}
	if _, err := s.ArchiveInfo(ctx); err != nil {
		t.Fatalf("ArchiveInfo after the GRANTs: %v", err)
	}
	if _, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: "e", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("EventReceive after the GRANTs: %v", err)
	}
	claims, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute})
	if err != nil || len(claims) != 1 {
		t.Fatalf("EventClaimMany after the GRANTs: %d claims, %v", len(claims), err)
	}
	if err := s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: claims[0].Event.Lease()}); err != nil {
		t.Fatalf("EventComplete after the GRANTs: %v", err)
	}
	everyOperation(t, s)
	// The GRANTs are a receiver's: the archive's partitions are the owner's
	// to create, and the refusal says who must run the workers.
	if _, err := s.ArchiveMaintain(ctx, &ferry.ArchiveMaintainParams{Owner: "w", Retention: 72 * time.Hour, ReplayWindow: 72 * time.Hour}); !errors.Is(err, ferry.ErrMisconfigured) ||
		!strings.Contains(err.Error(), "SQLSTATE 42501") || !strings.Contains(err.Error(), "only the owner may create and drop the archive's partitions): run the workers") {
		t.Errorf("ArchiveMaintain as a role with the GRANTs = %v, want ErrMisconfigured saying the owner must run it", err)
	}

	// A function revoked from PUBLIC (a hardening step) fails the
	// statements that call it: Ping names it, with its GRANT, which runs.
	if _, err := pool.Exec(ctx, `REVOKE EXECUTE ON FUNCTION ferry_event_find(bigint) FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	grant := "GRANT EXECUTE ON FUNCTION " + schema + ".ferry_event_find(event_row_id bigint) TO " + role
	if err := s.Ping(ctx); !errors.Is(err, ferry.ErrMisconfigured) || !strings.Contains(err.Error(), "EXECUTE on ferry_event_find") || !strings.HasSuffix(err.Error(), grant) {
		t.Fatalf("Ping with ferry_event_find revoked = %v, want it named with %q", err, grant)
	}
	asOwner(t, grant)
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after %s = %v, want nil", grant, err)
	}
}

// everyOperation runs each Store operation that a role with Ping's GRANTs
// must be able to run (all but a migration with work to do and the
// archive's maintenance, which need the owner), each on a path that
// writes what it can write, and fails the test on any error.
func everyOperation(t *testing.T, s *postgres.Store) {
	t.Helper()
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s with Ping's GRANTs: %v", what, err)
		}
	}
	receive := func(id, payload string) int64 {
		t.Helper()
		res, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "ops", EventID: id, Type: "t", Payload: []byte(payload)})
		check("EventReceive "+id, err)
		return res.ID
	}
	claim := func(n int) []ferry.Lease {
		t.Helper()
		claims, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: n, TTL: time.Minute, Sources: []string{"ops"}})
		check("EventClaimMany", err)
		if len(claims) != n {
			t.Fatalf("EventClaimMany: %d claims, want %d", len(claims), n)
		}
		var leases []ferry.Lease
		for _, c := range claims {
			leases = append(leases, c.Event.Lease())
		}
		return leases
	}
	first := receive("a", `{"n":1}`)
	receive("a", `{"n":2}`) // a conflict
	receive("b", `{"n":1}`) // the same body under a new id: a suspected replay
	_, err := s.EventReceiveMany(ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{
		{Source: "ops", EventID: "c", Payload: []byte(`{}`)}, {Source: "ops", EventID: "d", Payload: []byte(`{}`)},
	}})
	check("EventReceiveMany", err)

	leases := claim(4)
	_, err = s.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: leases[0], TTL: time.Minute})
	check("EventHeartbeat", err)
	_, err = s.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: leases, TTL: time.Minute})
	check("EventHeartbeatMany", err)
	_, err = s.EventFail(ctx, &ferry.EventFailParams{Lease: leases[0], Error: "retry", RetryDelay: time.Hour, MaxAttempts: 5})
	check("EventFail", err)
	_, err = s.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: leases[1], Error: "dead", Dead: true}}})
	check("EventFailMany", err)
	check("EventRelease", s.EventRelease(ctx, &ferry.EventReleaseParams{Lease: leases[2]}))
	check("EventCompleteTx", s.InTx(ctx, func(tx pgx.Tx) error {
		return s.EventCompleteTx(ctx, tx, &ferry.EventCompleteParams{Lease: leases[3]})
	}))
	_, err = s.EventRetryNow(ctx, &ferry.EventRetryNowParams{ID: leases[0].ID, Actor: "ops"})
	check("EventRetryNow", err)
	_, err = s.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{leases[1].ID}, Actor: "ops"})
	check("EventRequeue", err)
	leases = claim(3)
	_, err = s.EventCompleteMany(ctx, &ferry.EventCompleteManyParams{Leases: leases[:2]})
	check("EventCompleteMany", err)
	_, err = s.EventFail(ctx, &ferry.EventFailParams{Lease: leases[2], Error: "dead", Dead: true})
	check("EventFail to dead", err)
	_, err = s.EventResolve(ctx, &ferry.EventResolveParams{IDs: []int64{leases[2].ID}, Actor: "ops"})
	check("EventResolve", err)
	// The resolved event is archived: a batch with a replay window locks
	// it, then counts a delivery on it; a requeue takes it back.
	resolved, err := s.EventGet(ctx, &ferry.EventGetParams{ID: leases[2].ID})
	check("EventGet of an archived event", err)
	results, err := s.EventReceiveMany(ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{
		{Source: "ops", EventID: resolved.EventID, Type: "t", Payload: resolved.Payload, ReplayWindow: time.Hour},
		{Source: "ops", EventID: "e", Type: "t", Payload: []byte(`{"n":5}`), ReplayWindow: time.Hour},
	}})
	check("EventReceiveMany with a replay window", err)
	for _, r := range results {
		check("EventReceiveMany with a replay window", r.Err)
	}
	if got, err := s.EventGet(ctx, &ferry.EventGetParams{ID: leases[2].ID}); err != nil || got.Deliveries != resolved.Deliveries+1 {
		t.Fatalf("the archived event after its redelivery: %+v, %v; want one more delivery", got, err)
	}
	_, err = s.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{leases[2].ID}, Actor: "ops"})
	check("EventRequeue of an archived event", err)

	_, err = s.EventGet(ctx, &ferry.EventGetParams{ID: first})
	check("EventGet", err)
	_, err = s.EventList(ctx, &ferry.EventListParams{Source: "ops"})
	check("EventList", err)
	_, err = s.AttemptList(ctx, &ferry.AttemptListParams{ID: first})
	check("AttemptList", err)
	_, err = s.ActionList(ctx, &ferry.ActionListParams{ID: first})
	check("ActionList", err)
	_, err = s.ConflictList(ctx, &ferry.ConflictListParams{ID: first})
	check("ConflictList", err)
	_, err = s.ReplayList(ctx, &ferry.ReplayListParams{ID: first})
	check("ReplayList", err)
	_, err = s.ConflictNoticeList(ctx, &ferry.NoticeListParams{Source: "ops"})
	check("ConflictNoticeList", err)
	_, err = s.ReplayNoticeList(ctx, &ferry.NoticeListParams{Source: "ops"})
	check("ReplayNoticeList", err)
	_, err = s.EventStats(ctx, &ferry.EventStatsParams{})
	check("EventStats", err)
	_, err = s.MigratePlan(ctx)
	check("MigratePlan", err)
	purged, err := s.EventPurge(ctx, &ferry.EventPurgeParams{Source: "ops", Retention: time.Microsecond, ReplayWindow: time.Microsecond})
	check("EventPurge", err)
	if purged == 0 {
		t.Fatal("EventPurge purged nothing: the test does not reach its deletes")
	}

	_, err = s.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: "catchup:ops", Owner: "w", TTL: time.Minute})
	check("LeaseAcquire", err)
	check("CheckpointPut", s.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: "catchup:ops", Value: "1", Lease: "catchup:ops", Owner: "w"}))
	_, err = s.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: "catchup:ops"})
	check("CheckpointGet", err)
	check("LeaseRelease", s.LeaseRelease(ctx, &ferry.LeaseReleaseParams{Name: "catchup:ops", Owner: "w"}))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = s.ReceiptSubscribe(sctx)
	check("ReceiptSubscribe", err)
}

// usageOnly is a pgtest.Role that may use the schema and nothing in it.
func usageOnly(t testing.TB, schema, what string) (string, string) {
	return pgtest.Role(t, schema, what, "GRANT USAGE ON SCHEMA "+schema+" TO %s")
}

// asOwner runs sql as the test's user in a session of the server's default
// search_path, as an operator pastes what an error printed.
func asOwner(t *testing.T, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// PostgreSQL's predefined pg_read_all_data and pg_write_all_data (14+) give
// a role every table and sequence: Ping passes it, and it works.
func TestPingPassesTheAllDataRoles(t *testing.T) {
	t.Parallel()
	s, _, _, _ := asRole(t, "alldata", withSetup("GRANT pg_read_all_data, pg_write_all_data TO %s"))
	wantWritable(t, s, "as pg_read_all_data and pg_write_all_data")
}

// wantWritable wants Ping to pass and a receipt to be stored.
func wantWritable(t *testing.T, s *postgres.Store, when string) {
	t.Helper()
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping %s = %v, want nil", when, err)
	}
	if _, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: "e", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("EventReceive %s: %v", when, err)
	}
}

// With a search_path of two schemas whose second holds another migrated
// inbox, Migrate migrates the first, where CREATE puts the tables, and its
// plan lists every migration: it does not take the other inbox's ledger
// for this schema's.
func TestMigrateTheFirstSchemaOfTheSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	other, otherSchema := pgtest.Schema(t)
	teststore.PostgresOn(t, other, nil)
	_, schema := pgtest.Schema(t)
	s := postgres.New(pgtest.PoolOn(t, schema+","+otherSchema, nil), nil)
	t.Cleanup(s.Close)

	steps, err := s.MigratePlan(ctx)
	if err != nil || len(steps) == 0 || steps[0].Version != 1 {
		t.Fatalf("MigratePlan = %+v, %v; want every migration from the first: the schema first on the path has none", steps, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var tables int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename IN ('ferry_migration', 'ferry_event')`, schema).Scan(&tables); err != nil || tables != 2 {
		t.Fatalf("%s holds %d of ferry_migration and ferry_event (%v), want both: Migrate took the other schema's", schema, tables, err)
	}
}

// A search_path naming no schema that exists leaves nowhere to create the
// tables: Ping, the plan and Migrate each say so (ErrMisconfigured, naming
// the search_path), rather than PostgreSQL's "no schema has been selected
// to create in", or a plan of every migration.
func TestNoSchemaIsMisconfigured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := postgres.New(pgtest.PoolOn(t, "ferry_no_such_schema", nil), nil)
	t.Cleanup(s.Close)
	_, err := s.MigratePlan(ctx)
	for name, err := range map[string]error{"Ping": s.Ping(ctx), "MigratePlan": err, "Migrate": s.Migrate(ctx)} {
		if !errors.Is(err, ferry.ErrMisconfigured) || !strings.Contains(err.Error(), "the search_path (ferry_no_such_schema) names no schema that exists") {
			t.Errorf("%s = %v, want ErrMisconfigured naming the search_path", name, err)
		}
	}
}

// A role set read-only by default, then reset: Ping says read-only, and
// once the setting is reset, says writable on the next call, with no
// restart. Pooled sessions keep the setting they began with, so Ping
// resets the pool Open made when it finds one read-only.
func TestPingRecoversOnceTheStoreCanWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, _, role := asRole(t, "ro",
		withSetup("GRANT pg_read_all_data, pg_write_all_data TO %s", "ALTER ROLE %s SET default_transaction_read_only = on"))
	if err := s.Ping(ctx); !errors.Is(err, ferry.ErrReadOnly) {
		t.Fatalf("Ping as a role read-only by default = %v, want ErrReadOnly", err)
	}
	if _, err := pool.Exec(ctx, "ALTER ROLE "+role+" RESET default_transaction_read_only"); err != nil {
		t.Fatal(err)
	}
	wantWritable(t, s, "once the setting is reset")
}

// A schema whose name has capitals migrates, and then plans nothing: the
// ledger is looked for by the name as it is, not read again as an
// identifier (which folds it to lower case).
func TestMigrateAMixedCaseSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, base := pgtest.Schema(t) // a name of the test's own, and a schema dropped after it
	schema := "Mixed_" + base
	asOwner(t, `CREATE SCHEMA "`+schema+`"`)
	t.Cleanup(func() { asOwner(t, `DROP SCHEMA "`+schema+`" CASCADE`) })
	s := postgres.New(pgtest.PoolOn(t, `"`+schema+`"`, nil), nil)
	t.Cleanup(s.Close)
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate of %q: %v", schema, err)
		}
	}
	if steps, err := s.MigratePlan(ctx); err != nil || len(steps) != 0 {
		t.Fatalf("MigratePlan after Migrate = %+v, %v; want nothing", steps, err)
	}
}

// asRole migrates a schema of its own as the test's user and returns a
// store on it as a role that role makes (pgtest.Role's arguments, what
// naming it), the owner's pool, the schema and the role. t.Cleanup closes
// the store.
func asRole(t *testing.T, what string, role func(t testing.TB, schema, what string) (string, string)) (*postgres.Store, *pgxpool.Pool, string, string) {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	teststore.PostgresOn(t, pool, nil)
	storeURL, name := role(t, schema, what)
	s, err := postgres.Open(context.Background(), storeURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, pool, schema, name
}

// withSetup is pgtest.Role with setup, for asRole.
func withSetup(setup ...string) func(t testing.TB, schema, what string) (string, string) {
	return func(t testing.TB, schema, what string) (string, string) {
		return pgtest.Role(t, schema, what, setup...)
	}
}
