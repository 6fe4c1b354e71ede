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
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// Harness tells the suite how to make the store under test.
type Harness[TX any] struct {
	// NewStore returns a migrated, empty store that reads the time from now.
	// It is called once per test; the store must be isolated from every other
	// test's (a schema or a file per test) and closed in t.Cleanup.
	NewStore func(t *testing.T, now func() time.Time) ferry.TxStore[TX]

	// NewEffects creates, in the store's own database, a table of handler
	// effects with no unique constraint, and returns how to write and count
	// them. The exactly-once tests count its rows.
	NewEffects func(t *testing.T, store ferry.TxStore[TX]) Effects[TX]
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
	setup := func(t *testing.T) *bundle[TX] {
		t.Helper()
		clock := NewClock()
		return &bundle[TX]{clock: clock, store: h.NewStore(t, clock.Now), ctx: context.Background()}
	}

	effects := func(test func(*testing.T, func(*testing.T) *bundle[TX], func(*testing.T, ferry.TxStore[TX]) Effects[TX])) func(*testing.T, func(*testing.T) *bundle[TX]) {
		return func(t *testing.T, setup func(*testing.T) *bundle[TX]) { test(t, setup, h.NewEffects) }
	}
	for _, group := range []struct {
		name string
		test func(*testing.T, func(*testing.T) *bundle[TX])
	}{
		{"Receive", testReceive[TX]},
		{"Claim", testClaim[TX]},
		{"Lease", testLease[TX]},
		{"Fail", testFail[TX]},
		{"Requeue", testRequeue[TX]},
		{"List", testList[TX]},
		{"Purge", testPurge[TX]},
		{"Subscribe", testSubscribe[TX]},
		{"CompleteTx", effects(testCompleteTx[TX])},
		{"Concurrency", testConcurrency[TX]},
		{"Model", testModel[TX]},
		{"Stats", testStats[TX]},
		{"Extra", effects(testExtra[TX])},
		{"CompleteMany", testCompleteMany[TX]},
		{"NamedLease", testNamedLease[TX]},
		{"Checkpoint", testCheckpoint[TX]},
		{"Origin", testOrigin[TX]},
	} {
		t.Run(group.name, func(t *testing.T) {
			t.Parallel()
			group.test(t, setup)
		})
	}
}

// receive stores a new delivery and returns its row id.
func receive[TX any](t *testing.T, b *bundle[TX], source, eventID string) int64 {
	t.Helper()
	res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
		Source: source, EventID: eventID, Type: "test.event",
		Payload: []byte(`{"id":"` + eventID + `"}`),
		Headers: http.Header{"Content-Type": {"application/json"}},
	})
	if err != nil {
		t.Fatalf("EventReceive(%s, %s): %v", source, eventID, err)
	}
	if res.Outcome != ferry.ReceiveNew {
		t.Fatalf("EventReceive(%s, %s) outcome = %s, want new", source, eventID, res.Outcome)
	}
	return res.ID
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

func testReceive[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("NewIsPendingAndDueNow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		ev := wantState(t, b, id, ferry.StatePending)
		now := b.clock.Now()
		if ev.Source != "stripe" || ev.EventID != "evt_1" || ev.Type != "test.event" {
			t.Errorf("key = (%s, %s, %s)", ev.Source, ev.EventID, ev.Type)
		}
		if string(ev.Payload) != `{"id":"evt_1"}` || ev.Headers.Get("Content-Type") != "application/json" {
			t.Errorf("payload %q headers %v not kept", ev.Payload, ev.Headers)
		}
		if len(ev.PayloadSHA256) != 32 {
			t.Errorf("payload hash has %d bytes", len(ev.PayloadSHA256))
		}
		if ev.Attempt != 0 || ev.Deliveries != 1 || ev.Conflicts != 0 {
			t.Errorf("attempt %d deliveries %d conflicts %d", ev.Attempt, ev.Deliveries, ev.Conflicts)
		}
		if !ev.NextAttemptAt.Equal(now) || !ev.FirstDeliveredAt.Equal(now) || !ev.LastDeliveredAt.Equal(now) {
			t.Errorf("times next %v first %v last %v, want %v", ev.NextAttemptAt, ev.FirstDeliveredAt, ev.LastDeliveredAt, now)
		}
		if !ev.LeaseExpiresAt.IsZero() || ev.LeaseOwner != "" || !ev.ClaimedAt.IsZero() || !ev.CompletedAt.IsZero() {
			t.Errorf("fresh event has lease or claim: %+v", ev)
		}
	})

	t.Run("DuplicateCountsDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		b.clock.Advance(time.Minute)
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Type: "test.event", Payload: []byte(`{"id":"evt_1"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != ferry.ReceiveDuplicate || res.ID != id {
			t.Fatalf("outcome %s id %d, want duplicate %d", res.Outcome, res.ID, id)
		}
		ev := get(t, b, id)
		if ev.Deliveries != 2 || !ev.LastDeliveredAt.Equal(b.clock.Now()) || ev.FirstDeliveredAt.Equal(ev.LastDeliveredAt) {
			t.Errorf("deliveries %d first %v last %v", ev.Deliveries, ev.FirstDeliveredAt, ev.LastDeliveredAt)
		}
	})

	t.Run("SameEventIDOtherSourceIsNew", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := receive(t, b, "stripe", "evt_1")
		c := receive(t, b, "github", "evt_1")
		if a == c {
			t.Fatal("two sources share a row")
		}
	})

	t.Run("ConflictIsKept", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
			Source: "stripe", EventID: "evt_1", Payload: []byte(`{"id":"evt_1","forged":true}`),
			Headers: http.Header{"X-Test": {"conflict"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != ferry.ReceiveConflict || res.ID != id {
			t.Fatalf("outcome %s id %d, want conflict %d", res.Outcome, res.ID, id)
		}
		ev := get(t, b, id)
		if ev.Deliveries != 2 || ev.Conflicts != 1 || string(ev.Payload) != `{"id":"evt_1"}` {
			t.Errorf("deliveries %d conflicts %d payload %q: the first payload must stay", ev.Deliveries, ev.Conflicts, ev.Payload)
		}
		conflicts, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(conflicts) != 1 || string(conflicts[0].Payload) != `{"id":"evt_1","forged":true}` ||
			conflicts[0].Headers.Get("X-Test") != "conflict" || len(conflicts[0].PayloadSHA256) != 32 {
			t.Fatalf("conflicts = %+v", conflicts)
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range []*ferry.EventReceiveParams{{Source: "", EventID: "x"}, {Source: "s", EventID: ""}} {
			if _, err := b.store.EventReceive(b.ctx, p); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("EventReceive(%+v) err = %v, want ErrInvalidParams", p, err)
			}
		}
	})

	t.Run("GetByKeyAndNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "stripe", EventID: "evt_1"})
		if err != nil || ev.ID != id {
			t.Fatalf("EventGet by key = %v, %v", ev, err)
		}
		if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "stripe", EventID: "nope"}); !errors.Is(err, ferry.ErrNotFound) {
			t.Errorf("missing key err = %v, want ErrNotFound", err)
		}
		if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: id + 1000}); !errors.Is(err, ferry.ErrNotFound) {
			t.Errorf("missing id err = %v, want ErrNotFound", err)
		}
	})

	t.Run("ConcurrentSameKeyStoresOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 16
		outcomes := make([]ferry.ReceiveOutcome, n)
		ids := make([]int64, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_same", Payload: []byte("same")})
				if err != nil {
					t.Errorf("receive %d: %v", i, err)
					return
				}
				outcomes[i], ids[i] = res.Outcome, res.ID
			})
		}
		wg.Wait()
		news := 0
		for i := range n {
			if outcomes[i] == ferry.ReceiveNew {
				news++
			} else if outcomes[i] != ferry.ReceiveDuplicate {
				t.Errorf("receive %d outcome %s", i, outcomes[i])
			}
			if ids[i] != ids[0] {
				t.Errorf("receive %d id %d, want %d", i, ids[i], ids[0])
			}
		}
		if news != 1 {
			t.Errorf("%d receives were new, want 1", news)
		}
		if ev := get(t, b, ids[0]); ev.Deliveries != n {
			t.Errorf("deliveries = %d, want %d", ev.Deliveries, n)
		}
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{})
		if err != nil || len(page.Events) != 1 {
			t.Fatalf("list: %d events, %v; want 1", len(page.Events), err)
		}
	})
}

func testClaim[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("LeasesFromTheStoreClock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		c := claimOne(t, b, "w1")
		now := b.clock.Now()
		ev := c.Event
		if ev.ID != id || ev.State != ferry.StateInProgress || ev.Attempt != 1 || ev.LeaseOwner != "w1" {
			t.Fatalf("claimed %+v", ev)
		}
		if !ev.LeaseExpiresAt.Equal(now.Add(ttl)) || !ev.ClaimedAt.Equal(now) {
			t.Errorf("lease expires %v claimed %v, want %v and %v", ev.LeaseExpiresAt, ev.ClaimedAt, now.Add(ttl), now)
		}
		if string(ev.Payload) != `{"id":"evt_1"}` || ev.Headers.Get("Content-Type") != "application/json" {
			t.Errorf("claim lacks payload or headers: %q %v", ev.Payload, ev.Headers)
		}
		if c.PreviousUnfinished {
			t.Error("first claim says an earlier attempt was unfinished")
		}
		stored := wantState(t, b, id, ferry.StateInProgress)
		if stored.Attempt != 1 || !stored.LeaseExpiresAt.Equal(ev.LeaseExpiresAt) {
			t.Errorf("stored attempt %d lease %v", stored.Attempt, stored.LeaseExpiresAt)
		}
		ledger := attempts(t, b, id)
		if len(ledger) != 1 || ledger[0].Attempt != 1 || ledger[0].Worker != "w1" || ledger[0].Outcome != ferry.OutcomeRunning ||
			!ledger[0].StartedAt.Equal(now) || !ledger[0].FinishedAt.IsZero() {
			t.Fatalf("ledger = %+v", ledger)
		}
	})

	t.Run("OldestDueFirstWithinLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ids []int64
		for i := range 5 {
			ids = append(ids, receive(t, b, "stripe", fmt.Sprint("evt_", i)))
			b.clock.Advance(time.Second)
		}
		got := claim(t, b, "w1", 3)
		if len(got) != 3 {
			t.Fatalf("claimed %d, want 3", len(got))
		}
		for i, c := range got {
			if c.Event.ID != ids[i] {
				t.Errorf("claim %d = event %d, want %d", i, c.Event.ID, ids[i])
			}
		}
		rest := claim(t, b, "w2", 10)
		if len(rest) != 2 || rest[0].Event.ID != ids[3] || rest[1].Event.ID != ids[4] {
			t.Fatalf("second claim = %d events", len(rest))
		}
		if again := claim(t, b, "w3", 10); len(again) != 0 {
			t.Fatalf("leased events claimed again: %d", len(again))
		}
	})

	t.Run("SourcesFilter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		receive(t, b, "stripe", "evt_1")
		gh := receive(t, b, "github", "evt_1")
		got := claim(t, b, "w1", 10, "github")
		if len(got) != 1 || got[0].Event.ID != gh {
			t.Fatalf("claimed %d events from github filter", len(got))
		}
	})

	t.Run("NotYetDueIsSkipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		receive(t, b, "stripe", "evt_1")
		c := claimOne(t, b, "w1")
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), RetryDelay: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, b, "w1", 10); len(got) != 0 {
			t.Fatalf("claimed an event before its next attempt time")
		}
		b.clock.Advance(time.Minute)
		if got := claim(t, b, "w1", 10); len(got) != 1 || got[0].Event.Attempt != 2 {
			t.Fatalf("due event not claimed: %d", len(got))
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range []*ferry.EventClaimManyParams{
			{Owner: "", Limit: 1, TTL: ttl}, {Owner: "w", Limit: 0, TTL: ttl}, {Owner: "w", Limit: 1, TTL: 0},
		} {
			if _, err := b.store.EventClaimMany(b.ctx, p); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("EventClaimMany(%+v) err = %v, want ErrInvalidParams", p, err)
			}
		}
	})
}

func testLease[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("ExpiredLeaseIsReclaimed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		first := claimOne(t, b, "w1")
		b.clock.Advance(ttl - time.Millisecond)
		if got := claim(t, b, "w2", 10); len(got) != 0 {
			t.Fatal("a living lease was taken")
		}
		b.clock.Advance(time.Millisecond)
		second := claimOne(t, b, "w2")
		if second.Event.ID != id || second.Event.Attempt != first.Event.Attempt+1 || second.Event.LeaseOwner != "w2" {
			t.Fatalf("reclaim = %+v", second.Event)
		}
		if !second.PreviousUnfinished {
			t.Error("reclaim does not say the earlier attempt was unfinished")
		}
		ledger := attempts(t, b, id)
		if len(ledger) != 2 || ledger[0].Outcome != ferry.OutcomeLeaseExpired || !ledger[0].FinishedAt.Equal(b.clock.Now()) ||
			ledger[1].Outcome != ferry.OutcomeRunning || ledger[1].Worker != "w2" {
			t.Fatalf("ledger = %+v %+v", ledger[0], ledger[len(ledger)-1])
		}
	})

	t.Run("DeadWorkersEventGoesBeforeNewerWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		orphan := receive(t, b, "stripe", "evt_orphan")
		claimOne(t, b, "dead-worker")
		b.clock.Advance(time.Second)
		for i := range 5 { // a backlog received after the orphan was claimed
			receive(t, b, "stripe", fmt.Sprint("evt_backlog_", i))
		}
		b.clock.Advance(ttl)
		if c := claimOne(t, b, "survivor"); c.Event.ID != orphan {
			t.Fatalf("claimed event %d first, want the dead worker's %d ahead of the newer backlog", c.Event.ID, orphan)
		}
	})

	t.Run("HeartbeatKeepsALivingWorker", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		c := claimOne(t, b, "w1")
		for range 6 { // 6 × ttl/2 = 3 × ttl: a slow handler on a living worker
			b.clock.Advance(ttl / 2)
			exp, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: c.Event.Lease(), TTL: ttl})
			if err != nil {
				t.Fatalf("heartbeat: %v", err)
			}
			if !exp.Equal(b.clock.Now().Add(ttl)) {
				t.Fatalf("heartbeat expiry %v, want %v", exp, b.clock.Now().Add(ttl))
			}
			if got := claim(t, b, "thief", 10); len(got) != 0 {
				t.Fatal("a heartbeated lease was taken")
			}
		}
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()}); err != nil {
			t.Fatal(err)
		}
		ev := wantState(t, b, id, ferry.StateDone)
		if !ev.CompletedAt.Equal(b.clock.Now()) || ev.LeaseOwner != "" || !ev.LeaseExpiresAt.IsZero() {
			t.Errorf("done event: completed %v owner %q expiry %v", ev.CompletedAt, ev.LeaseOwner, ev.LeaseExpiresAt)
		}
		wantOutcomes(t, b, id, ferry.OutcomeDone)
	})

	t.Run("RobbedWorkerIsFenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		zombie := claimOne(t, b, "zombie").Event.Lease()
		b.clock.Advance(ttl)
		claimOne(t, b, "w2")
		before, ledgerBefore := get(t, b, id), attempts(t, b, id)

		_, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: zombie, TTL: ttl})
		wantLeaseLost(t, "heartbeat", err)
		wantLeaseLost(t, "complete", b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: zombie}))
		_, err = b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: zombie, Error: "late", Dead: true})
		wantLeaseLost(t, "fail", err)
		wantLeaseLost(t, "release", b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: zombie}))
		err = b.store.InTx(b.ctx, func(tx TX) error {
			return b.store.EventCompleteTx(b.ctx, tx, &ferry.EventCompleteParams{Lease: zombie})
		})
		wantLeaseLost(t, "complete in tx", err)

		if after := get(t, b, id); !reflect.DeepEqual(before, after) {
			t.Errorf("a fenced write changed the event:\nbefore %+v\nafter  %+v", before, after)
		}
		if after := attempts(t, b, id); !reflect.DeepEqual(ledgerBefore, after) {
			t.Errorf("a fenced write changed the ledger")
		}
	})

	t.Run("ExpiredLeaseIsNotHeldEvenUnclaimed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		b.clock.Advance(ttl)
		_, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: lease, TTL: ttl})
		wantLeaseLost(t, "heartbeat after expiry", err)
		wantLeaseLost(t, "complete after expiry", b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}))
		wantState(t, b, id, ferry.StateInProgress)
	})

	t.Run("CompleteOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		wantLeaseLost(t, "second complete", b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}))
		if got := claim(t, b, "w2", 10); len(got) != 0 {
			t.Fatal("a done event was claimed")
		}
	})

	t.Run("ReleaseIsDueAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		b.clock.Advance(time.Second)
		if err := b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		ev := wantState(t, b, id, ferry.StatePending)
		if !ev.NextAttemptAt.Equal(b.clock.Now()) || ev.LeaseOwner != "" || !ev.LeaseExpiresAt.IsZero() {
			t.Errorf("released: next %v owner %q expiry %v", ev.NextAttemptAt, ev.LeaseOwner, ev.LeaseExpiresAt)
		}
		next := claimOne(t, b, "w2")
		if next.PreviousUnfinished || next.Event.Attempt != 2 {
			t.Errorf("after release: attempt %d previous unfinished %v", next.Event.Attempt, next.PreviousUnfinished)
		}
		wantOutcomes(t, b, id, ferry.OutcomeReleased, ferry.OutcomeRunning)
	})

	t.Run("HoldMovesLostLeaseToUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		held := receive(t, b, "payments", "evt_1")
		retried := receive(t, b, "stripe", "evt_1")
		claim(t, b, "w1", 10)
		b.clock.Advance(ttl)
		got, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w2", Limit: 10, TTL: ttl, HoldSources: []string{"payments"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Event.ID != retried {
			t.Fatalf("claimed %d events, want only the retry source's", len(got))
		}
		ev := wantState(t, b, held, ferry.StateUnknown)
		if ev.LeaseOwner != "" || !ev.LeaseExpiresAt.IsZero() {
			t.Errorf("unknown event keeps a lease: %q %v", ev.LeaseOwner, ev.LeaseExpiresAt)
		}
		wantOutcomes(t, b, held, ferry.OutcomeLeaseExpired)
		b.clock.Advance(ttl)
		if got := claim(t, b, "w3", 10); len(got) != 1 || got[0].Event.ID != retried {
			t.Fatalf("an unknown event was claimed")
		}
	})
}

func testFail[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("BackoffThenRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Error: "downstream 500", RetryDelay: 10 * time.Second, MaxAttempts: 3})
		if err != nil || state != ferry.StatePending {
			t.Fatalf("fail = %s, %v", state, err)
		}
		ev := wantState(t, b, id, ferry.StatePending)
		if ev.LastError != "downstream 500" || !ev.NextAttemptAt.Equal(b.clock.Now().Add(10*time.Second)) || ev.LeaseOwner != "" {
			t.Errorf("failed event: error %q next %v owner %q", ev.LastError, ev.NextAttemptAt, ev.LeaseOwner)
		}
		ledger := attempts(t, b, id)
		if len(ledger) != 1 || ledger[0].Outcome != ferry.OutcomeFailed || ledger[0].Error != "downstream 500" || ledger[0].FinishedAt.IsZero() {
			t.Fatalf("ledger = %+v", ledger[0])
		}
	})

	t.Run("DeadAfterMaxAttempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		for i := 1; i <= 3; i++ {
			lease := claimOne(t, b, "w1").Event.Lease()
			state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Error: "boom", MaxAttempts: 3})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]ferry.State{true: ferry.StateDead, false: ferry.StatePending}[i == 3]; state != want {
				t.Fatalf("attempt %d: state %s, want %s", i, state, want)
			}
		}
		wantState(t, b, id, ferry.StateDead)
		wantOutcomes(t, b, id, ferry.OutcomeFailed, ferry.OutcomeFailed, ferry.OutcomeDead)
		if got := claim(t, b, "w1", 10); len(got) != 0 {
			t.Fatal("a dead event was claimed")
		}
	})

	t.Run("DeadOnceOlderThanMaxAge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		b.clock.Advance(72*time.Hour - ttl)
		lease := claimOne(t, b, "w1").Event.Lease()
		state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, MaxAge: 72 * time.Hour})
		if err != nil || state != ferry.StatePending {
			t.Fatalf("younger than max age: %s, %v", state, err)
		}
		b.clock.Advance(ttl)
		lease = claimOne(t, b, "w1").Event.Lease()
		state, err = b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, MaxAge: 72 * time.Hour})
		if err != nil || state != ferry.StateDead {
			t.Fatalf("at max age: %s, %v", state, err)
		}
		wantState(t, b, id, ferry.StateDead)
	})

	t.Run("PermanentErrorIsDeadAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Error: "404", Dead: true, MaxAttempts: 25})
		if err != nil || state != ferry.StateDead {
			t.Fatalf("fail = %s, %v", state, err)
		}
		wantOutcomes(t, b, id, ferry.OutcomeDead)
	})
}

func testRequeue[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("DeadGetsAFreshBudget", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, id, ferry.StateDead)
		b.clock.Advance(time.Hour)
		n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{id}})
		if err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		ev := wantState(t, b, id, ferry.StatePending)
		if !ev.RequeuedAt.Equal(b.clock.Now()) || !ev.NextAttemptAt.Equal(b.clock.Now()) || ev.Attempt != 1 {
			t.Errorf("requeued: at %v next %v attempt %d", ev.RequeuedAt, ev.NextAttemptAt, ev.Attempt)
		}
		c := claimOne(t, b, "w1")
		if c.Event.Attempt != 2 {
			t.Fatalf("attempt after requeue = %d, want 2 (the fencing token never goes down)", c.Event.Attempt)
		}
		state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), MaxAttempts: 2})
		if err != nil || state != ferry.StatePending {
			t.Fatalf("first failure after requeue = %s, %v; want pending (fresh budget)", state, err)
		}
	})

	t.Run("DoneAndUnknownByIDButNeverLive", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		done := receive(t, b, "stripe", "done")
		lease := claimOne(t, b, "w1").Event.Lease()
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		live := receive(t, b, "stripe", "live")
		claimOne(t, b, "w1")
		pending := receive(t, b, "stripe", "pending")
		n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{done, live, pending}, States: ferry.States})
		if err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v; want 1", n, err)
		}
		ev := wantState(t, b, done, ferry.StatePending)
		if !ev.CompletedAt.IsZero() {
			t.Errorf("requeued event keeps completed_at %v", ev.CompletedAt)
		}
		wantState(t, b, live, ferry.StateInProgress)
	})

	t.Run("BulkBySourceTakesDeadAndUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var dead []int64
		for i := range 3 {
			dead = append(dead, receive(t, b, "stripe", fmt.Sprint("d", i)))
		}
		other := receive(t, b, "github", "d")
		for range 4 {
			lease := claimOne(t, b, "w1").Event.Lease()
			if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Dead: true}); err != nil {
				t.Fatal(err)
			}
		}
		n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{Source: "stripe"})
		if err != nil || n != 3 {
			t.Fatalf("bulk requeue = %d, %v; want 3", n, err)
		}
		for _, id := range dead {
			wantState(t, b, id, ferry.StatePending)
		}
		wantState(t, b, other, ferry.StateDead)
	})
}

func testList[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("FiltersAndPages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ids []int64
		for i := range 7 {
			ids = append(ids, receive(t, b, "stripe", fmt.Sprintf("evt_%d", i)))
		}
		receive(t, b, "github", "evt_x")
		receive(t, b, "stripe", "evt_100%")
		start := b.clock.Now()
		b.clock.Advance(time.Minute)
		late := receive(t, b, "stripe", "late")
		lease := claimOne(t, b, "w1").Event.Lease() // claims ids[0], the oldest due
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}

		var seen []int64
		before := int64(0)
		for pages := 0; ; pages++ {
			page, err := b.store.EventList(b.ctx, &ferry.EventListParams{Source: "stripe", Limit: 3, Before: before})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range page.Events {
				if ev.Source != "stripe" || ev.Payload != nil || ev.Headers != nil {
					t.Fatalf("listed %s/%s with payload %q headers %v", ev.Source, ev.EventID, ev.Payload, ev.Headers)
				}
				seen = append(seen, ev.ID)
			}
			if page.NextBefore == 0 {
				break
			}
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			before = page.NextBefore
		}
		if len(seen) != 9 || !slices.IsSortedFunc(seen, func(a, b int64) int { return int(b - a) }) {
			t.Fatalf("paged ids %v: want 9, newest first", seen)
		}

		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{States: []ferry.State{ferry.StateDone}})
		if err != nil || len(page.Events) != 1 || page.Events[0].ID != ids[0] || page.Events[0].State != ferry.StateDone {
			t.Fatalf("done filter: %v %v", page, err)
		}
		page, err = b.store.EventList(b.ctx, &ferry.EventListParams{EventIDContains: "0%"})
		if err != nil || len(page.Events) != 1 || page.Events[0].EventID != "evt_100%" {
			t.Fatalf("search for a literal %%: %+v %v", page, err)
		}
		page, err = b.store.EventList(b.ctx, &ferry.EventListParams{Since: start.Add(time.Second)})
		if err != nil || len(page.Events) != 1 || page.Events[0].ID != late {
			t.Fatalf("since filter: %+v %v", page, err)
		}
	})
}

func testPurge[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("KeepsTheReplayWindow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := receive(t, b, "stripe", "old")
		fresh := receive(t, b, "stripe", "fresh")
		for range 2 {
			lease := claimOne(t, b, "w1").Event.Lease()
			if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
				t.Fatal(err)
			}
		}
		// Both are done; a day later fresh is replayed and done again, so it is younger.
		b.clock.Advance(24 * time.Hour)
		if err := requeueAndComplete(b, fresh); err != nil {
			t.Fatal(err)
		}
		pending := receive(t, b, "stripe", "pending")
		other := receive(t, b, "github", "old")
		lease := claim(t, b, "w1", 1, "github")[0].Event.Lease()
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}

		_, err := b.store.EventPurge(b.ctx, &ferry.EventPurgeParams{Source: "stripe", Retention: 71 * time.Hour, ReplayWindow: 72 * time.Hour})
		if !errors.Is(err, ferry.ErrRetentionTooShort) {
			t.Fatalf("purge below the replay window: err = %v, want ErrRetentionTooShort", err)
		}
		b.clock.Advance(72*time.Hour - 24*time.Hour)
		n, err := b.store.EventPurge(b.ctx, &ferry.EventPurgeParams{Source: "stripe", Retention: 72 * time.Hour, ReplayWindow: 72 * time.Hour})
		if err != nil || n != 1 {
			t.Fatalf("purge = %d, %v; want 1", n, err)
		}
		if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: old}); !errors.Is(err, ferry.ErrNotFound) {
			t.Errorf("purged event still there: %v", err)
		}
		if got := attempts(t, b, old); len(got) != 0 {
			t.Errorf("purged event's ledger remains: %d rows", len(got))
		}
		wantState(t, b, fresh, ferry.StateDone)
		wantState(t, b, pending, ferry.StatePending)
		wantState(t, b, other, ferry.StateDone)
	})
}

func requeueAndComplete[TX any](b *bundle[TX], id int64) error {
	if _, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{id}}); err != nil {
		return err
	}
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 10, TTL: ttl, Sources: []string{"stripe"}})
	if err != nil {
		return err
	}
	for _, c := range claims {
		if c.Event.ID == id {
			return b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()})
		}
	}
	return fmt.Errorf("requeued event %d not claimed", id)
}

func testSubscribe[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("WakesOnReceipt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(b.ctx)
		wake, err := b.store.ReceiptSubscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		receive(t, b, "stripe", "evt_1")
		select {
		case <-wake:
		case <-time.After(10 * time.Second):
			t.Fatal("no wake-up within 10 s of a receipt")
		}
		cancel()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case _, ok := <-wake:
				if !ok {
					return
				}
			case <-deadline:
				t.Fatal("channel not closed after ctx was done")
			}
		}
	})
}
