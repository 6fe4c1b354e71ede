package postgres_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/postgres"
)

// What only PostgreSQL's archive has: which rows the key purge and the
// list read, and the plans that keep their cost to what they need.

// gone deletes the stored event of key id, as a dropped partition does,
// leaving its key.
func (b *archiveBundle) gone(t *testing.T, id int64) {
	t.Helper()
	if _, err := b.store.Pool().Exec(b.ctx, `DELETE FROM ferry_event_done WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// doneOf receives eventID of source, then claims and completes it now.
func (b *archiveBundle) doneOf(t *testing.T, source, eventID string) int64 {
	t.Helper()
	id := b.received(t, source, eventID)
	b.complete(t, source, id)
	return id
}

func (b *archiveBundle) received(t *testing.T, source, eventID string) int64 {
	t.Helper()
	res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: source, EventID: eventID, Payload: []byte(eventID)})
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

// complete claims source's one due event, id, and completes it now.
func (b *archiveBundle) complete(t *testing.T, source string, id int64) {
	t.Helper()
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute, Sources: []string{source}})
	if err != nil || len(claims) != 1 || claims[0].Event.ID != id {
		t.Fatalf("claim of %d: %d claims, %v", id, len(claims), err)
	}
	if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: claims[0].Event.Lease()}); err != nil {
		t.Fatal(err)
	}
}

// The key purge takes, oldest first, the keys past retention whose event
// is stored nowhere, of one source or of all; never a key whose event is
// archived or live, nor a younger one.
func TestArchiveKeyPurgeTakesOnlyKeysOfGoneEvents(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	b.maintain(t, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 7 * 24 * time.Hour})
	archived := b.doneOf(t, "s", "archived")
	live := b.received(t, "u", "live") // never claimed: pending in ferry_event
	gone := b.doneOf(t, "s", "gone")
	other := b.doneOf(t, "t", "other")
	b.gone(t, gone)
	b.gone(t, other)
	b.clock.Advance(time.Hour)
	gone2 := b.doneOf(t, "s", "gone2")
	b.gone(t, gone2)
	b.clock.Advance(time.Hour)
	young := b.doneOf(t, "s", "young")
	b.gone(t, young)
	// The first four are 25.5 h old, gone2 24.5 h, young 23.5 h.
	b.clock.Advance(23*time.Hour + 30*time.Minute)

	keys := func() []int64 {
		t.Helper()
		rows, _ := b.store.Pool().Query(b.ctx, `SELECT id FROM ferry_event_key ORDER BY id`)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	purge := func(source string, batch, want int) {
		t.Helper()
		n, err := postgres.PurgeKeys(b.store, b.ctx, source, 24*time.Hour, batch)
		if err != nil || n != want {
			t.Fatalf("purge of %q, batch %d = %d, %v; want %d", source, batch, n, err, want)
		}
	}
	purge("s", 1, 1) // the oldest first
	if got, want := keys(), []int64{archived, live, other, gone2, young}; !slices.Equal(got, want) {
		t.Fatalf("keys after a batch of one of s = %v, want %v (gone %d purged)", got, want, gone)
	}
	purge("s", 10, 1)
	if got, want := keys(), []int64{archived, live, other, young}; !slices.Equal(got, want) {
		t.Fatalf("keys after s's purge = %v, want %v (gone2 %d purged, t's kept)", got, want, gone2)
	}
	purge("", 10, 1)
	if got, want := keys(), []int64{archived, live, young}; !slices.Equal(got, want) {
		t.Fatalf("keys after every source's purge = %v, want %v (other %d purged)", got, want, other)
	}
	purge("", 10, 0)
}

// A key a redelivery rewrites while the purge waits on it stays, for the
// next run: the purge deletes the row versions it read, never a newer one.
func TestArchiveKeyPurgeLeavesAKeyARedeliveryRewrote(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	x := b.doneOf(t, "s", "x")
	y := b.doneOf(t, "s", "y")
	b.gone(t, x)
	b.gone(t, y)
	b.clock.Advance(25 * time.Hour)
	// What a receipt of x does to its key (ON CONFLICT DO UPDATE), held.
	blocker, err := b.store.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(b.ctx) }()
	var blockerPid int
	if err := blocker.QueryRow(b.ctx, `UPDATE ferry_event_key SET id = id WHERE source = 's' AND event_id = 'x' RETURNING pg_backend_pid()`).Scan(&blockerPid); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int
		err error
	}
	purged := make(chan result, 1)
	go func() {
		n, err := postgres.PurgeKeys(b.store, b.ctx, "s", 24*time.Hour, 10)
		purged <- result{n, err}
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var waiting bool
		if err := b.store.Pool().QueryRow(b.ctx, `
			SELECT EXISTS (SELECT FROM pg_stat_activity
			               WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '-- Purges up to % dedupe keys %')`,
			blockerPid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("after a minute, the purge does not wait on the rewritten key")
		}
	}
	if err := blocker.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-purged; r.err != nil || r.n != 1 {
		t.Fatalf("purge beside the redelivery = %d, %v; want 1 (y's key)", r.n, r.err)
	}
	if n := b.count(t, `SELECT count(*) FROM ferry_event_key WHERE id = $1`, x); n != 1 {
		t.Fatalf("x's key, rewritten during the purge, is gone")
	}
	if n, err := postgres.PurgeKeys(b.store, b.ctx, "s", 24*time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("next purge = %d, %v; want 1 (x's key)", n, err)
	}
}

// EventList with Since reads only the archive's days from Since on, and
// still lists every event first delivered since then, however much later
// it completed, the one completed at the instant of Since too.
func TestEventListSinceListsWhatCompletedLater(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	b.maintain(t, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 7 * 24 * time.Hour})
	b.doneOf(t, "old", "old")
	before := b.received(t, "before", "before")
	b.clock.Advance(24 * time.Hour)
	since := b.clock.Now()
	at := b.doneOf(t, "at", "at") // first delivered and completed at since
	b.clock.Advance(time.Hour)
	later := b.received(t, "later", "later")
	b.clock.Advance(48 * time.Hour)
	b.complete(t, "before", before)
	b.complete(t, "later", later)
	b.received(t, "live", "live")

	all, err := b.store.EventList(b.ctx, &ferry.EventListParams{Limit: 1000})
	if err != nil || len(all.Events) != 5 {
		t.Fatalf("list = %d events, %v; want 5", len(all.Events), err)
	}
	var want []int64
	for _, e := range all.Events {
		if !e.FirstDeliveredAt.Before(since) {
			want = append(want, e.ID)
		}
	}
	ids := func(p ferry.EventListParams) []int64 {
		t.Helper()
		res, err := b.store.EventList(b.ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, e := range res.Events {
			got = append(got, e.ID)
		}
		return got
	}
	if got := ids(ferry.EventListParams{Since: since}); !slices.Equal(got, want) || !slices.Contains(got, at) {
		t.Errorf("list since = %v, want %v (at %d among them)", got, want, at)
	}
	if got := ids(ferry.EventListParams{Since: since, States: []ferry.State{ferry.StateDone}, Limit: 1}); !slices.Equal(got, want[1:2]) {
		t.Errorf("newest done since = %v, want %v", got, want[1:2])
	}
	if got := ids(ferry.EventListParams{Since: since, After: 1, Limit: 2}); !slices.Equal(got, []int64{later, at}) {
		t.Errorf("oldest two since, paging up = %v, want %v", got, []int64{later, at})
	}
}

// planSetup returns a store whose archive has partitions for the days days
// before the clock's and the next, holding perDay done events a day, with
// their keys, and gone keys received before all of them whose events are
// stored nowhere; analyzed.
func planSetup(t *testing.T, days, perDay, gone int) *archiveBundle {
	t.Helper()
	b := archiveSetup(t)
	b.maintain(t, &ferry.ArchiveMaintainParams{Owner: "m", Retention: time.Duration(days) * 24 * time.Hour, Ahead: 24 * time.Hour})
	now := b.clock.Now()
	n := days * perDay
	b.exec(t, pgx.NamedArgs{"now": now, "n": n, "days": days, "gone": gone},
		`INSERT INTO ferry_event_done (id, source, event_id, payload, payload_sha256, state, attempt,
		                               next_attempt_at, first_delivered_at, last_delivered_at, completed_at)
		 SELECT i, 's' || i % 4, 'e' || i, '', sha256(int8send(i)), 'done', 1, at, at, at, at
		 FROM generate_series(1, @n::int) i,
		      LATERAL (SELECT @now::timestamptz - (@n::int - i) * (@days::int * interval '1 day') / @n::int AS at) x`,
		`INSERT INTO ferry_event_key (source, event_id, id, payload_sha256, received_at)
		 SELECT source, event_id, id, payload_sha256, first_delivered_at FROM ferry_event_done`,
		`INSERT INTO ferry_event_key (source, event_id, id, payload_sha256, received_at)
		 SELECT 's' || i % 4, 'gone' || i, @n::int + i, sha256(int8send(-i)),
		        @now::timestamptz - @days::int * interval '1 day' - i * interval '1 second'
		 FROM generate_series(1, @gone::int) i`,
		`ANALYZE ferry_event_key, ferry_event, ferry_event_done`,
	)
	return b
}

// exec runs each statement with args, in order, on the store's pool.
func (b *archiveBundle) exec(t *testing.T, args pgx.NamedArgs, statements ...string) {
	t.Helper()
	for _, sql := range statements {
		if _, err := b.store.Pool().Exec(b.ctx, sql, args); err != nil {
			t.Fatal(err)
		}
	}
}

// duePending inserts n pending events, ids 1 to n, due a second apart in id
// order up to now: the first split of source older, the rest of newer. It
// analyzes them, for the planner.
func (b *archiveBundle) duePending(t *testing.T, now time.Time, n, split int, older, newer string) {
	t.Helper()
	b.exec(t, pgx.NamedArgs{"now": now, "n": n, "split": split, "older": older, "newer": newer},
		`INSERT INTO ferry_event (id, source, event_id, payload, payload_sha256, state,
		                          next_attempt_at, first_delivered_at, last_delivered_at)
		 SELECT i, CASE WHEN i <= @split::int THEN @older::text ELSE @newer::text END, 'e' || i, '', sha256(int8send(i)), 'pending',
		        @now::timestamptz - (@n::int - i) * interval '1 second', @now, @now
		 FROM generate_series(1, @n::int) i`,
		`ANALYZE ferry_event`,
	)
}

// claimArgs are EventClaimManySQL's arguments for a claim of sources (every
// source when empty) with a minute's lease, no hold sources and no byte cap.
func claimArgs(now time.Time, owner string, limit int, sources []string) pgx.NamedArgs {
	return pgx.NamedArgs{
		"now": now, "owner": owner, "limit": limit, "ttl_us": time.Minute.Microseconds(),
		"sources": sources, "hold_sources": []string{}, "max_bytes": int64(0),
	}
}

// planNode is one node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType     string     `json:"Node Type"`
	Relation     string     `json:"Relation Name"`
	Index        string     `json:"Index Name"`
	IndexCond    string     `json:"Index Cond"`
	Relationship string     `json:"Parent Relationship"`
	Subplan      string     `json:"Subplan Name"`
	Plans        []planNode `json:"Plans"`
	// Set by EXPLAIN ANALYZE, per loop.
	ActualRows      float64 `json:"Actual Rows"`
	ActualLoops     float64 `json:"Actual Loops"`
	RemovedByFilter float64 `json:"Rows Removed by Filter"`
}

// explain returns the plan of sql with args, as the store would run it
// (a custom plan: the statement is planned with the values bound).
func (b *archiveBundle) explain(t *testing.T, sql string, args pgx.NamedArgs) planNode {
	t.Helper()
	return b.explainWith(t, "EXPLAIN (FORMAT JSON) ", sql, args)
}

// explainAnalyze runs sql with args under EXPLAIN ANALYZE in a transaction
// it rolls back, so what the statement writes is undone, and returns the
// plan with the rows each node read.
func (b *archiveBundle) explainAnalyze(t *testing.T, sql string, args pgx.NamedArgs) planNode {
	t.Helper()
	return b.explainWith(t, "EXPLAIN (ANALYZE, FORMAT JSON) ", sql, args)
}

func (b *archiveBundle) explainWith(t *testing.T, explain, sql string, args pgx.NamedArgs) planNode {
	t.Helper()
	tx, err := b.store.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	var out string
	if err := tx.QueryRow(b.ctx, explain+sql, args).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %q: %v", out, err)
	}
	return plans[0].Plan
}

// walk calls visit on every node of the plan with its ancestors, root first.
func (n planNode) walk(visit func(n planNode, ancestors []planNode)) {
	var rec func(n planNode, ancestors []planNode)
	rec = func(n planNode, ancestors []planNode) {
		visit(n, ancestors)
		for _, c := range n.Plans {
			rec(c, append(ancestors[:len(ancestors):len(ancestors)], n))
		}
	}
	rec(n, nil)
}

func (n planNode) String() string {
	var sb strings.Builder
	n.walk(func(n planNode, ancestors []planNode) {
		sb.WriteString(strings.Repeat("  ", len(ancestors)) + n.NodeType)
		if n.Relation != "" {
			sb.WriteString(" on " + n.Relation)
		}
		if n.Relationship != "" {
			sb.WriteString(" (" + n.Relationship + ")")
		}
		sb.WriteString("\n")
	})
	return sb.String()
}

// eventListArgs are EventList's arguments with no filter, a page of 50
// newest first, and set as given.
func eventListArgs(set pgx.NamedArgs) pgx.NamedArgs {
	args := pgx.NamedArgs{
		"source": "", "type": "", "states": []string{}, "since": nil, "until": nil,
		"event_id_like": "", "lapsed": false, "before": int64(0), "after": int64(0), "limit": 51,
	}
	for k, v := range set {
		args[k] = v
	}
	return args
}

// The key purge looks each key it reads up in the archive, by id: never a
// hash (or any join) over the archive's partitions, which would read every
// archived id for a batch of keys, or for none.
func TestArchiveKeyPurgePlanProbesTheArchivePerKey(t *testing.T) {
	t.Parallel()
	const days = 8
	b := planSetup(t, days, 2500, 1000)
	for _, source := range []string{"", "s1"} {
		plan := b.explain(t, postgres.ArchiveKeysPurgeSQL, pgx.NamedArgs{
			"now": b.clock.Now(), "source": source, "key_retention_us": (days * 24 * time.Hour).Microseconds(), "batch": 10000,
		})
		probes := 0
		plan.walk(func(n planNode, ancestors []planNode) {
			if !strings.HasPrefix(n.Relation, "ferry_event_done") {
				return
			}
			probes++
			probe := n.Relationship == "SubPlan"
			for _, a := range ancestors {
				probe = probe || a.Relationship == "SubPlan"
				if a.NodeType == "Hash" || strings.HasSuffix(a.NodeType, "Join") {
					t.Errorf("source %q: %s reads %s under a %s:\n%s", source, n.NodeType, n.Relation, a.NodeType, plan)
					return
				}
			}
			if !probe {
				t.Errorf("source %q: %s reads %s outside a per-key subplan:\n%s", source, n.NodeType, n.Relation, plan)
			}
		})
		if probes < days {
			t.Errorf("source %q: the plan reads %d archive partitions, want every one of %d:\n%s", source, probes, days, plan)
		}
	}
}

// EventList with Since never reads the archive's days before it.
func TestEventListPlanPrunesTheDaysBeforeSince(t *testing.T) {
	t.Parallel()
	const days = 8
	b := planSetup(t, days, 200, 0)
	since := b.clock.Now().Add(-2 * 24 * time.Hour)
	for _, p := range []struct {
		name string
		args pgx.NamedArgs
	}{
		{"newest first", pgx.NamedArgs{"type": "invoice.paid"}},
		{"paging up", pgx.NamedArgs{"after": int64(5)}},
	} {
		p.args["since"] = since
		wantPrunedBefore(t, "the list, "+p.name, since, b.explain(t, postgres.EventListSQL, eventListArgs(p.args)))
	}
}

// wantPrunedBefore fails the test unless the oldest archive day plan reads
// is since's.
func wantPrunedBefore(t *testing.T, name string, since time.Time, plan planNode) {
	t.Helper()
	var read []string
	plan.walk(func(n planNode, _ []planNode) {
		if strings.HasPrefix(n.Relation, "ferry_event_done_2") && !slices.Contains(read, n.Relation) {
			read = append(read, n.Relation)
		}
	})
	slices.Sort(read)
	if first := "ferry_event_done_" + since.UTC().Format("20060102"); len(read) == 0 || read[0] != first {
		t.Errorf("%s: since %s reads partitions %v, want %s the oldest:\n%s", name, since, read, first, plan)
	}
}

// A bulk replay of done events since a time, and its dry run's count, never
// read the archive's days before it.
func TestEventRequeuePlanPrunesTheDaysBeforeSince(t *testing.T) {
	t.Parallel()
	const days = 8
	b := planSetup(t, days, 200, 0)
	since := b.clock.Now().Add(-2 * 24 * time.Hour)
	args := pgx.NamedArgs{
		"now": b.clock.Now(), "states": []string{"done"}, "ids": []int64{}, "source": "", "type": "",
		"since": since, "until": nil, "event_id_like": "", "before": int64(0), "action": "replay", "actor": "op",
	}
	for name, sql := range map[string]string{"requeue": postgres.EventRequeueSQL, "dry run": postgres.EventRequeueCountSQL} {
		wantPrunedBefore(t, name, since, b.explain(t, sql, args))
	}
}

// EventList with LapsedAttempts reads the lapsed attempts through the
// ledgers' partial indexes and looks their events up by id, in the hot
// table and in every archive partition: never a read of the events until a
// page of them matches, which at a few lapsed attempts among millions of
// events is all of them.
func TestEventListPlanLooksLapsedAttemptsUp(t *testing.T) {
	t.Parallel()
	const days = 8
	b := planSetup(t, days, 2500, 0)
	pool := b.store.Pool()
	b.exec(t, pgx.NamedArgs{"now": b.clock.Now()},
		// Every archived event has an attempt; one in a thousand lapsed.
		`INSERT INTO ferry_attempt_done (event_id, attempt, worker, started_at, finished_at, outcome, completed_at)
		 SELECT id, 1, 'w', completed_at, completed_at, CASE WHEN id % 1000 = 0 THEN 'lease_expired' ELSE 'done' END, completed_at
		 FROM ferry_event_done`,
		// As many live events after them, the same way: pending again
		// after their first attempt.
		`INSERT INTO ferry_event_key (source, event_id, id, payload_sha256, received_at)
		 SELECT 's' || i % 4, 'live' || i, i, sha256(int8send(i)), @now::timestamptz
		 FROM generate_series(100001, 120000) i`,
		`INSERT INTO ferry_event (id, source, event_id, payload, payload_sha256, state, attempt, next_attempt_at, first_delivered_at, last_delivered_at)
		 SELECT id, source, event_id, '', payload_sha256, 'pending', 1, received_at, received_at, received_at
		 FROM ferry_event_key WHERE id > 100000`,
		`INSERT INTO ferry_attempt (event_id, attempt, worker, started_at, finished_at, outcome)
		 SELECT id, 1, 'w', @now::timestamptz, @now::timestamptz, CASE WHEN id % 1000 = 0 THEN 'lease_expired' ELSE 'failed' END
		 FROM ferry_event`,
		`ANALYZE ferry_event, ferry_attempt, ferry_attempt_done`,
	)
	// The partitions that hold most of a day: a scan reads the clock's
	// day, 3 hours of it, whole, as it should.
	rows, _ := pool.Query(b.ctx, `
		SELECT tableoid::regclass::text FROM ferry_event_done GROUP BY 1 HAVING count(*) > 2000
		UNION ALL
		SELECT tableoid::regclass::text FROM ferry_attempt_done GROUP BY 1 HAVING count(*) > 2000`)
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(held) != 2*days {
		t.Fatalf("partitions holding most of a day: %v, %v; want %d", held, err, 2*days)
	}
	held = append(held, "ferry_event", "ferry_attempt")
	lookup := func(n planNode) bool {
		found := false
		n.walk(func(n planNode, _ []planNode) { found = found || strings.Contains(n.IndexCond, "id = ANY") })
		return found
	}
	for _, p := range []struct {
		name string
		args pgx.NamedArgs
	}{
		{"newest first", pgx.NamedArgs{}},
		{"of a source", pgx.NamedArgs{"source": "s0"}},
		{"paging up", pgx.NamedArgs{"after": int64(5)}},
	} {
		p.args["lapsed"] = true
		plan := b.explain(t, postgres.EventListSQL, eventListArgs(p.args))
		read := map[string]bool{}
		plan.walk(func(n planNode, _ []planNode) {
			if !slices.Contains(held, n.Relation) {
				return
			}
			read[n.Relation] = true
			switch events := strings.HasPrefix(n.Relation, "ferry_event"); {
			case events && !lookup(n):
				t.Errorf("%s: %s reads %s without looking the lapsed ids up:\n%s", p.name, n.NodeType, n.Relation, plan)
			case !events && (!strings.Contains(n.NodeType, "Index") || strings.HasSuffix(n.Index, "_pkey")):
				t.Errorf("%s: %s reads %s (index %q), not its lapsed attempts' index:\n%s", p.name, n.NodeType, n.Relation, n.Index, plan)
			}
		})
		if len(read) != len(held) {
			t.Errorf("%s: the plan reads %d of the %d tables that hold rows, want all:\n%s", p.name, len(read), len(held), plan)
		}
	}
}

// A claim reads each claimed event's ledger by its primary key, newest
// attempts first, to tell whether the last attempt that ran never ended:
// never a scan or a hash of the ledger, whose size is every live event's
// attempts. The ledger here is the worst case for the probe: each event's
// newest attempts were released, so it walks back past them.
func TestClaimPlanProbesTheLedgerPerEvent(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	now := b.clock.Now()
	b.exec(t, pgx.NamedArgs{"now": now},
		`INSERT INTO ferry_event (id, source, event_id, payload, payload_sha256, state, attempt,
		                          next_attempt_at, first_delivered_at, last_delivered_at)
		 SELECT i, 's' || i % 4, 'e' || i, '', sha256(int8send(i)), 'pending', 5,
		        @now::timestamptz - i * interval '1 second', @now, @now
		 FROM generate_series(1, 20000) i`,
		`INSERT INTO ferry_attempt (event_id, attempt, worker, started_at, finished_at, outcome)
		 SELECT i, a, 'w', @now, @now, CASE WHEN a = 1 THEN 'lease_expired' ELSE 'released' END
		 FROM generate_series(1, 20000) i, generate_series(1, 5) a`,
		`ANALYZE ferry_event, ferry_attempt`,
	)
	for _, limit := range []int{1, 100} {
		plan := b.explain(t, postgres.EventClaimManySQL, claimArgs(now, "w", limit, []string{}))
		probes := 0
		plan.walk(func(n planNode, ancestors []planNode) {
			if n.Relation != "ferry_attempt" && n.Index != "ferry_attempt_pkey" {
				return
			}
			inDue, perEvent := false, false
			for i, a := range ancestors {
				inDue = inDue || a.Subplan == "CTE due"
				child := n // the node below a on the way to n
				if i+1 < len(ancestors) {
					child = ancestors[i+1]
				}
				perEvent = perEvent || (a.NodeType == "Nested Loop" && child.Relationship == "Inner")
				if a.NodeType == "Hash" || a.NodeType == "Hash Join" || a.NodeType == "Merge Join" {
					t.Errorf("limit %d: %s reads the ledger under a %s:\n%s", limit, n.NodeType, a.NodeType, plan)
					return
				}
			}
			if !inDue {
				return
			}
			probes++
			if n.NodeType == "Seq Scan" || !perEvent {
				t.Errorf("limit %d: the claim reads the ledger by a %s outside a per-event probe:\n%s", limit, n.NodeType, plan)
			}
		})
		if probes == 0 {
			t.Errorf("limit %d: the claim never reads the ledger:\n%s", limit, plan)
		}
	}
}

// A claim reads its own sources' due events and no other's: a backlog of a
// source it does not claim (one taken out of the config, or one whose
// instance is down), older than everything it claims, adds nothing to what
// each claim reads. Without sources it reads each source's oldest.
func TestClaimPlanReadsOnlyItsSourcesDueEvents(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	now := b.clock.Now()
	b.duePending(t, now, 22000, 20000, "other", "s1")
	const limit = 10
	for _, sources := range [][]string{{"s1"}, {"s1", "s2"}, {}} {
		plan := b.explainAnalyze(t, postgres.EventClaimManySQL, claimArgs(now, "w", limit, sources))
		read := 0.0
		plan.walk(func(n planNode, ancestors []planNode) {
			if n.Relation != "ferry_event" || !slices.ContainsFunc(ancestors, func(a planNode) bool { return a.Subplan == "CTE pending_due" }) {
				return
			}
			read += (n.ActualRows + n.RemovedByFilter) * n.ActualLoops
		})
		// Each source with due events read up to limit, whatever the backlog.
		if most := float64(limit * 2); read == 0 || read > most {
			t.Errorf("sources %v: the claim's pending scan read %v rows of ferry_event, want 1 to %v:\n%s", sources, read, most, plan)
		}
	}
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: limit, TTL: time.Minute, Sources: []string{"s1"}})
	if err != nil || len(claims) != limit {
		t.Fatalf("claim of s1: %d claims, %v", len(claims), err)
	}
	for i, c := range claims {
		if want := int64(20001 + i); c.Event.Source != "s1" || c.Event.ID != want {
			t.Errorf("claim %d is %s/%d, want s1/%d, oldest due first", i, c.Event.Source, c.Event.ID, want)
		}
	}
}

// A claim beside another (another worker's, or the next of this one's)
// takes the next due events of its sources, past those the other holds,
// oldest first: the rows the other locked and did not keep are skipped
// until it ends, never waited for.
func TestClaimBesideAClaimTakesTheNextDueEvents(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	now := b.clock.Now()
	// y: 15 due, the oldest; x: 50 due after them.
	b.duePending(t, now, 65, 15, "y", "x")
	// The first claim's transaction stays open, and what it locked locked.
	tx, err := b.store.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	rows, _ := tx.Query(b.ctx, postgres.EventClaimManySQL, claimArgs(now, "a", 10, []string{"x", "y"}))
	first, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil || len(first) != 10 || first[0]["id"] != int64(1) || first[9]["id"] != int64(10) {
		t.Fatalf("first claim: %d rows, %v; want y's 10 oldest", len(first), err)
	}
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "b", Limit: 10, TTL: time.Minute, Sources: []string{"x", "y"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, c := range claims {
		ids = append(ids, c.Event.ID)
	}
	// y's last 5, then 5 of x in due order (which 5 depends on what the
	// first claim locked of x and did not keep).
	if len(ids) != 10 || !slices.Equal(ids[:5], []int64{11, 12, 13, 14, 15}) || ids[5] <= 15 || !slices.IsSorted(ids) {
		t.Errorf("beside the first claim: %v, want y's 11 to 15, then 5 of x (16 on), oldest first", ids)
	}
}
