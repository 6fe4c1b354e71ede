package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
)

// These tests drive EventReceiveMany with batches whose keys repeat, so that
// the one-statement path (event_receive_many.sql) meets every ordering of
// new, duplicate and conflicting deliveries of one key.

func batchTestStore(t *testing.T) *Store {
	t.Helper()
	pool, _ := pgtest.Schema(t)
	s := New(pool, nil)
	t.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func delivery(source, id, payload string) *ferry.EventReceiveParams {
	return &ferry.EventReceiveParams{Source: source, EventID: id, Type: "t", Payload: []byte(payload),
		Headers: http.Header{"X-Payload": {payload}}}
}

func runBatch(t *testing.T, s *Store, reqs ...*ferry.EventReceiveParams) []ferry.ReceiveOutcome {
	t.Helper()
	results, err := s.EventReceiveMany(context.Background(), &ferry.EventReceiveManyParams{Receipts: reqs})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []ferry.ReceiveOutcome
	for i, r := range results {
		if r.Err != nil {
			t.Fatalf("delivery %d: %v", i, r.Err)
		}
		outcomes = append(outcomes, r.Result.Outcome)
	}
	return outcomes
}

// keyRow is what the store holds for one key, conflicts included.
type keyRow struct {
	Type, Payload, Headers string
	Deliveries, Conflicts  int
	ConflictRows           []string // payload and headers of each, in id order
}

func readKey(t *testing.T, s *Store, source, id string) keyRow {
	t.Helper()
	ctx := context.Background()
	var k keyRow
	var eid int64
	err := s.pool.QueryRow(ctx, `
		SELECT id, type, convert_from(payload, 'UTF8'), coalesce(headers::text, ''), deliveries, conflicts
		FROM ferry_event WHERE source = $1 AND event_id = $2`, source, id).
		Scan(&eid, &k.Type, &k.Payload, &k.Headers, &k.Deliveries, &k.Conflicts)
	if err != nil {
		t.Fatalf("read %s/%s: %v", source, id, err)
	}
	rows, _ := s.pool.Query(ctx, `
		SELECT convert_from(payload, 'UTF8') || ' ' || coalesce(headers::text, '')
		FROM ferry_conflict WHERE event_id = $1 ORDER BY id`, eid)
	k.ConflictRows, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestReceiveBatchSameKeyNew(t *testing.T) {
	s := batchTestStore(t)
	got := runBatch(t, s,
		delivery("src", "k", "a"), delivery("src", "other", "x"), delivery("src", "k", "a"),
		delivery("src", "k", "b"), delivery("src", "k", "a"), delivery("src", "k", "c"))
	want := []ferry.ReceiveOutcome{ferry.ReceiveNew, ferry.ReceiveNew, ferry.ReceiveDuplicate,
		ferry.ReceiveConflict, ferry.ReceiveDuplicate, ferry.ReceiveConflict}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	k := readKey(t, s, "src", "k")
	if k.Payload != "a" || k.Deliveries != 5 || k.Conflicts != 2 {
		t.Fatalf("stored %+v: want the first payload, 5 deliveries, 2 conflicts", k)
	}
	if want := []string{`b {"X-Payload": ["b"]}`, `c {"X-Payload": ["c"]}`}; !slices.Equal(k.ConflictRows, want) {
		t.Fatalf("conflict rows %q, want %q", k.ConflictRows, want)
	}
	if o := readKey(t, s, "src", "other"); o.Deliveries != 1 || o.Conflicts != 0 || len(o.ConflictRows) != 0 {
		t.Fatalf("other key %+v", o)
	}
}

func TestReceiveBatchSameKeyKnown(t *testing.T) {
	s := batchTestStore(t)
	runBatch(t, s, delivery("src", "k", "a"))
	got := runBatch(t, s,
		delivery("src", "k", "b"), delivery("src", "k", "a"), delivery("src", "new", "n"), delivery("src", "k", "b"))
	want := []ferry.ReceiveOutcome{ferry.ReceiveConflict, ferry.ReceiveDuplicate, ferry.ReceiveNew, ferry.ReceiveConflict}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	k := readKey(t, s, "src", "k")
	if k.Payload != "a" || k.Deliveries != 4 || k.Conflicts != 2 || len(k.ConflictRows) != 1 {
		t.Fatalf("stored %+v: want payload a, 4 deliveries, 2 conflicts counted, b kept once", k)
	}
}

// A value PostgreSQL refuses fails its own delivery only.
func TestReceiveBatchBadDeliveryAlone(t *testing.T) {
	s := batchTestStore(t)
	bad := delivery("src", "bad\x00id", "x")
	res, err := s.EventReceiveMany(context.Background(), &ferry.EventReceiveManyParams{
		Receipts: []*ferry.EventReceiveParams{delivery("src", "a", "1"), bad, delivery("src", "a", "1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[1].Err == nil {
		t.Fatal("a NUL in a text value was accepted")
	}
	if res[0].Err != nil || res[0].Result.Outcome != ferry.ReceiveNew || res[2].Err != nil || res[2].Result.Outcome != ferry.ReceiveDuplicate {
		t.Fatalf("neighbours: %+v %+v", res[0], res[2])
	}
	if k := readKey(t, s, "src", "a"); k.Deliveries != 2 {
		t.Fatalf("deliveries %d, want 2", k.Deliveries)
	}
}

// Random batches give the outcomes and the rows that the same deliveries
// give one at a time.
func TestReceiveBatchMatchesSequential(t *testing.T) {
	batched, sequential := batchTestStore(t), batchTestStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := map[[2]string]bool{}
	for round := range 40 {
		reqs := make([]*ferry.EventReceiveParams, 1+rng.IntN(24))
		for i := range reqs {
			key := [2]string{fmt.Sprint("src", rng.IntN(2)), fmt.Sprint("k", rng.IntN(6))}
			keys[key] = true
			reqs[i] = delivery(key[0], key[1], fmt.Sprint("p", rng.IntN(3)))
		}
		got := runBatch(t, batched, reqs...)
		for i, r := range reqs {
			want, err := sequential.EventReceive(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if got[i] != want.Outcome {
				t.Fatalf("round %d delivery %d (%s/%s %s): batched %v, sequential %v",
					round, i, r.Source, r.EventID, r.Payload, got[i], want.Outcome)
			}
		}
	}
	for key := range keys {
		b, q := readKey(t, batched, key[0], key[1]), readKey(t, sequential, key[0], key[1])
		if fmt.Sprint(b) != fmt.Sprint(q) {
			t.Fatalf("%s: batched %+v\nsequential %+v", strings.Join(key[:], "/"), b, q)
		}
	}
}
