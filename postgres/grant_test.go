package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
)

// A role that may read Ferry's tables but not write them fails Ping with
// ErrMisconfigured, naming what it lacks and the GRANT: /readyz and doctor
// passed it while every delivery got 503. The GRANT it names is enough for
// the work: after it, the role receives, claims and completes an event,
// and a Migrate with nothing to do (serve's at every start) needs no
// CREATE on the schema.
func TestPingNamesAMissingGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := teststore.Postgres(t, nil)
	pool := owner.Pool()
	schema := pool.Config().ConnConfig.RuntimeParams["search_path"]
	storeURL, role := pgtest.ReaderRole(t, schema, "grant")
	s, err := postgres.Open(ctx, storeURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if _, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: "refused", Payload: []byte(`{}`)}); err == nil {
		t.Fatal("EventReceive as a role with SELECT alone succeeded: the test grants too much")
	}
	err = s.Ping(ctx)
	grant := "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role +
		"; GRANT USAGE ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role
	if !errors.Is(err, ferry.ErrMisconfigured) || !strings.Contains(err.Error(), "the role "+role+" lacks INSERT on ferry_action, UPDATE on ferry_action") ||
		!strings.Contains(err.Error(), "USAGE on ferry_event_id_seq") ||
		!strings.HasSuffix(err.Error(), grant) {
		t.Fatalf("Ping as a role with SELECT alone = %v, want ErrMisconfigured naming what it lacks and ending %q", err, grant)
	}
	// Not SELECT, which it has; not ferry_migration, which only a
	// migration writes; not the archive's default partitions, written
	// through their parents.
	for _, wrong := range []string{"SELECT on", "ferry_migration", "_default"} {
		if strings.Contains(err.Error(), wrong) {
			t.Errorf("Ping names %q: %v", wrong, err)
		}
	}
	// An archive partition is written through its parent, and a detached
	// one is about to be dropped: the role needs nothing on either.
	for _, sql := range []string{
		`CREATE TABLE ferry_event_done_20990101 PARTITION OF ferry_event_done FOR VALUES FROM ('2099-01-01') TO ('2099-01-02')`,
		`CREATE TABLE ferry_event_done_20990102 (LIKE ferry_event_done)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ping(ctx); err == nil || strings.Contains(err.Error(), "2099") {
		t.Errorf("Ping with partitions the role was not granted = %v, want the same error, naming neither", err)
	}

	if _, err := pool.Exec(ctx, grant); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after %s = %v, want nil", grant, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate of an up-to-date schema as a role without CREATE: %v", err)
	}
	if _, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: "e", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("EventReceive after the GRANT: %v", err)
	}
	claims, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute})
	if err != nil || len(claims) != 1 {
		t.Fatalf("EventClaimMany after the GRANT: %d claims, %v", len(claims), err)
	}
	if err := s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: claims[0].Event.Lease()}); err != nil {
		t.Fatalf("EventComplete after the GRANT: %v", err)
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
