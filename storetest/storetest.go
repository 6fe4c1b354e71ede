// Package storetest is the contract every ferry.Store must keep. The postgres
// and sqlite packages run it from their tests; a third-party store should too:
//
//	func TestContract(t *testing.T) {
//		storetest.Exercise(t, storetest.Harness[*sql.Tx]{NewStore: ..., NewEffects: ...})
//	}
//
// Time is a fake Clock the suite moves; no test sleeps to let a lease expire.
package storetest

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// Harness tells the suite how to make the store under test.
type Harness[TX any] struct {
	// NewStore returns an empty store, not yet migrated (the suite calls
	// Migrate), that reads the time from now. It is called once per test;
	// the store must be isolated from every other test's (a schema or a file
	// per test) and closed in t.Cleanup.
	NewStore func(t *testing.T, now func() time.Time) ferry.TxStore[TX]

	// NewEffects creates, in the store's own database, a table of handler
	// effects with no unique constraint, and returns how to write and count
	// them. The exactly-once tests count its rows.
	NewEffects func(t *testing.T, store ferry.TxStore[TX]) Effects[TX]

	// Close closes a store NewStore made, as its owner does at shutdown
	// (NewStore's cleanup may close it again). Optional: without it the
	// suite skips the check that subscriptions end with their store.
	Close func(store ferry.TxStore[TX])

	// RecordMigration records version as applied in the store's own table
	// of migrations, as the Migrate of a newer Ferry would: the suite checks
	// that this build then refuses to migrate or plan. Required.
	RecordMigration func(t *testing.T, store ferry.TxStore[TX], version int)

	// ReadOnly returns another store on store's database that answers but
	// cannot write, as after a failover to a standby or on a file made
	// read-only, closed in t.Cleanup: the suite checks that Ping says so,
	// and that a dry-run EventRequeue still counts (it must only read).
	// Required.
	ReadOnly func(t *testing.T, store ferry.TxStore[TX]) ferry.TxStore[TX]
}

// Effects writes and counts a handler's side effects in the store's database.
type Effects[TX any] struct {
	// Insert records one effect for key inside tx.
	Insert func(ctx context.Context, tx TX, key string) error
	// Count returns how many effects key has, committed.
	Count func(ctx context.Context, key string) (int, error)
}

const ttl = 30 * time.Second

type bundle[TX any] struct {
	clock *Clock
	store ferry.TxStore[TX]
	ctx   context.Context
}

// Exercise runs the whole contract against the harness's store.
func Exercise[TX any](t *testing.T, h Harness[TX]) {
	unmigrated := func(t *testing.T) *bundle[TX] {
		t.Helper()
		clock := NewClock()
		return &bundle[TX]{clock: clock, store: h.NewStore(t, clock.Now), ctx: context.Background()}
	}
	setup := func(t *testing.T) *bundle[TX] {
		t.Helper()
		b := unmigrated(t)
		if err := b.store.Migrate(b.ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		return b
	}

	effects := func(test func(*testing.T, func(*testing.T) *bundle[TX], func(*testing.T, ferry.TxStore[TX]) Effects[TX])) func(*testing.T, func(*testing.T) *bundle[TX]) {
		return func(t *testing.T, setup func(*testing.T) *bundle[TX]) { test(t, setup, h.NewEffects) }
	}
	for _, group := range []struct {
		name string
		test func(*testing.T, func(*testing.T) *bundle[TX])
	}{
		{"Receive", testReceive[TX]},
		{"Replay", testReplay[TX]},
		{"Claim", testClaim[TX]},
		{"Lease", testLease[TX]},
		{"Fail", testFail[TX]},
		{"Requeue", func(t *testing.T, setup func(*testing.T) *bundle[TX]) { testRequeue(t, setup, h.ReadOnly) }},
		{"Resolve", testResolve[TX]},
		{"List", testList[TX]},
		{"Purge", testPurge[TX]},
		{"Archive", testArchive[TX]},
		{"History", testHistory[TX]},
		{"Subscribe", func(t *testing.T, setup func(*testing.T) *bundle[TX]) { testSubscribe(t, setup, h.Close) }},
		{"Migrate", func(t *testing.T, setup func(*testing.T) *bundle[TX]) {
			testMigrate(t, setup, unmigrated, h.RecordMigration)
		}},
		{"InvalidParams", testInvalidParams[TX]},
		{"CompleteTx", effects(testCompleteTx[TX])},
		{"Concurrency", testConcurrency[TX]},
		{"Model", testModel[TX]},
		{"Stats", testStats[TX]},
		{"CompleteMany", testCompleteMany[TX]},
		{"HeartbeatMany", testHeartbeatMany[TX]},
		{"FailMany", testFailMany[TX]},
		{"Response", testResponse[TX]},
		{"NamedLease", testNamedLease[TX]},
		{"Checkpoint", testCheckpoint[TX]},
		{"Origin", testOrigin[TX]},
		{"Notice", testNotice[TX]},
		{"Trace", testTrace[TX]},
		{"Ping", func(t *testing.T, setup func(*testing.T) *bundle[TX]) { testPing(t, setup, h.ReadOnly) }},
	} {
		t.Run(group.name, func(t *testing.T) {
			t.Parallel()
			group.test(t, setup)
		})
	}
}

// errOnly is a call's error without its result: the cases that only check
// how an operation refuses.
func errOnly[T any](_ T, err error) error { return err }

// receive stores a new delivery and returns its row id.
func receive[TX any](t *testing.T, b *bundle[TX], source, eventID string) int64 {
	t.Helper()
	res := receiveWith(t, b, &ferry.EventReceiveParams{
		Source: source, EventID: eventID, Type: "test.event",
		Payload: []byte(`{"id":"` + eventID + `"}`),
		Headers: http.Header{"Content-Type": {"application/json"}},
	})
	if res.Outcome != ferry.ReceiveNew {
		t.Fatalf("EventReceive(%s, %s) outcome = %s, want new", source, eventID, res.Outcome)
	}
	return res.ID
}

// receiveWith stores the delivery p and returns the result, whatever the
// outcome.
func receiveWith[TX any](t *testing.T, b *bundle[TX], p *ferry.EventReceiveParams) *ferry.EventReceiveResult {
	t.Helper()
	res, err := b.store.EventReceive(b.ctx, p)
	if err != nil {
		t.Fatalf("EventReceive(%s, %s): %v", p.Source, p.EventID, err)
	}
	return res
}

func claim[TX any](t *testing.T, b *bundle[TX], owner string, limit int, sources ...string) []*ferry.Claim {
	t.Helper()
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: owner, Limit: limit, TTL: ttl, Sources: sources})
	if err != nil {
		t.Fatalf("EventClaimMany(%s): %v", owner, err)
	}
	return claims
}

func claimOne[TX any](t *testing.T, b *bundle[TX], owner string) *ferry.Claim {
	t.Helper()
	claims := claim(t, b, owner, 1)
	if len(claims) != 1 {
		t.Fatalf("EventClaimMany(%s) claimed %d events, want 1", owner, len(claims))
	}
	return claims[0]
}

// makeUnknown receives a fresh stripe event and makes it unknown: a hold
// source's lease that lapsed.
func makeUnknown[TX any](t *testing.T, b *bundle[TX], eventID string) int64 {
	t.Helper()
	id := receive(t, b, "stripe", eventID)
	claimOne(t, b, "w1")
	b.clock.Advance(ttl)
	hold := &ferry.EventClaimManyParams{Owner: "w2", Limit: 10, TTL: ttl, Sources: []string{"stripe"}, HoldSources: []string{"stripe"}}
	if _, err := b.store.EventClaimMany(b.ctx, hold); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, id, ferry.StateUnknown)
	return id
}

// mustComplete completes the lease and fails the test on an error.
func mustComplete[TX any](t *testing.T, b *bundle[TX], lease ferry.Lease) {
	t.Helper()
	if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
		t.Fatalf("EventComplete(%v): %v", lease, err)
	}
}

func get[TX any](t *testing.T, b *bundle[TX], id int64) *ferry.Event {
	t.Helper()
	ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: id})
	if err != nil {
		t.Fatalf("EventGet(%d): %v", id, err)
	}
	return ev
}

func attempts[TX any](t *testing.T, b *bundle[TX], id int64) []*ferry.Attempt {
	t.Helper()
	list, err := b.store.AttemptList(b.ctx, &ferry.AttemptListParams{ID: id})
	if err != nil {
		t.Fatalf("AttemptList(%d): %v", id, err)
	}
	return list
}

func wantState[TX any](t *testing.T, b *bundle[TX], id int64, want ferry.State) *ferry.Event {
	t.Helper()
	ev := get(t, b, id)
	if ev.State != want {
		t.Fatalf("event %d state = %s, want %s", id, ev.State, want)
	}
	return ev
}

func wantOutcomes[TX any](t *testing.T, b *bundle[TX], id int64, want ...ferry.Outcome) {
	t.Helper()
	var got []ferry.Outcome
	for _, a := range attempts(t, b, id) {
		got = append(got, a.Outcome)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("event %d ledger outcomes = %v, want %v", id, got, want)
	}
}

func wantLeaseLost(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, ferry.ErrLeaseLost) {
		t.Fatalf("%s: err = %v, want ErrLeaseLost", op, err)
	}
}

func requeueAndComplete[TX any](b *bundle[TX], id int64) error {
	return requeueAndCompleteSource(b, id, "stripe")
}
