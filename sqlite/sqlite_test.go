package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type testBundle struct {
	store *sqlite.Store
	clock *fakeClock
	path  string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupConfig(t, &sqlite.Config{})
}

func setupConfig(t *testing.T, config *sqlite.Config) *testBundle {
	t.Helper()
	clock := &fakeClock{now: time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)}
	config.Now = clock.Now
	path := filepath.Join(t.TempDir(), "ferry.db")
	store, err := sqlite.Open(path, config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &testBundle{store: store, clock: clock, path: path}
}

func (b *testBundle) receive(t *testing.T, source, eventID string) int64 {
	t.Helper()
	res, err := b.store.EventReceive(t.Context(), &ferry.EventReceiveParams{
		Source: source, EventID: eventID, Type: "test.event",
		Payload: []byte(`{"id":"` + eventID + `"}`),
		Headers: http.Header{"Content-Type": {"application/json"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

func (b *testBundle) claim(t *testing.T, owner string, limit int, ttl time.Duration) []*ferry.Claim {
	t.Helper()
	claims, err := b.store.EventClaimMany(t.Context(), &ferry.EventClaimManyParams{Owner: owner, Limit: limit, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return claims
}

func (b *testBundle) get(t *testing.T, id int64) *ferry.Event {
	t.Helper()
	e, err := b.store.EventGet(t.Context(), &ferry.EventGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (b *testBundle) attempts(t *testing.T, id int64) []*ferry.Attempt {
	t.Helper()
	a, err := b.store.AttemptList(t.Context(), &ferry.AttemptListParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestOpen(t *testing.T) {
	t.Parallel()

	t.Run("RejectsMemory", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"", ":memory:", "file:x?mode=memory"} {
			if _, err := sqlite.Open(path, nil); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("Open(%q) = %v, want ErrInvalidParams", path, err)
			}
		}
	})

	t.Run("PragmasPerConnection", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for pragma, want := range map[string]string{
			"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "5000",
		} {
			var got string
			if err := b.store.DB().QueryRow("PRAGMA " + pragma).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
			}
		}
	})

	t.Run("FileDSN", func(t *testing.T) {
		t.Parallel()
		path := "file:" + filepath.Join(t.TempDir(), "ferry.db") + "?cache=private"
		store, err := sqlite.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if err := store.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("Idempotent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := b.store.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := b.store.DB().QueryRow("SELECT count(*) FROM ferry_migration").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("ferry_migration rows = %d, want 1", n)
		}
	})

	t.Run("ConcurrentProcesses", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ferry.db")
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				store, err := sqlite.Open(path, nil)
				if err != nil {
					errs <- err
					return
				}
				defer store.Close()
				errs <- store.Migrate(t.Context())
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
}

func TestEventReceive(t *testing.T) {
	t.Parallel()

	t.Run("NewDuplicateConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := t.Context()
		params := &ferry.EventReceiveParams{
			Source: "stripe", EventID: "evt_1", Type: "invoice.paid",
			Payload: []byte(`{"a":1}`), Headers: http.Header{"X-Test": {"1"}},
		}
		first, err := b.store.EventReceive(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if first.Outcome != ferry.ReceiveNew || first.ID == 0 {
			t.Fatalf("first = %+v, want new with an id", first)
		}
		b.clock.Advance(time.Second)
		dup, err := b.store.EventReceive(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if dup.Outcome != ferry.ReceiveDuplicate || dup.ID != first.ID {
			t.Fatalf("dup = %+v, want duplicate of %d", dup, first.ID)
		}
		other := *params
		other.Payload = []byte(`{"a":2}`)
		other.Headers = http.Header{"X-Other": {"2"}}
		conflict, err := b.store.EventReceive(ctx, &other)
		if err != nil {
			t.Fatal(err)
		}
		if conflict.Outcome != ferry.ReceiveConflict || conflict.ID != first.ID {
			t.Fatalf("conflict = %+v, want conflict of %d", conflict, first.ID)
		}

		e := b.get(t, first.ID)
		if e.Deliveries != 3 || e.Conflicts != 1 || e.State != ferry.StatePending {
			t.Errorf("deliveries, conflicts, state = %d, %d, %s; want 3, 1, pending", e.Deliveries, e.Conflicts, e.State)
		}
		if string(e.Payload) != `{"a":1}` || e.Headers.Get("X-Test") != "1" || e.Type != "invoice.paid" {
			t.Errorf("stored event = %+v, want the first delivery", e)
		}
		if !e.LastDeliveredAt.Equal(e.FirstDeliveredAt.Add(time.Second)) {
			t.Errorf("last delivered %v, first %v: want one second apart", e.LastDeliveredAt, e.FirstDeliveredAt)
		}
		conflicts, err := b.store.ConflictList(ctx, &ferry.ConflictListParams{ID: first.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(conflicts) != 1 || string(conflicts[0].Payload) != `{"a":2}` || conflicts[0].Headers.Get("X-Other") != "2" ||
			len(conflicts[0].PayloadSHA256) != 32 || conflicts[0].EventID != first.ID {
			t.Errorf("conflicts = %+v, want the second payload", conflicts)
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range []*ferry.EventReceiveParams{{Source: "s"}, {EventID: "e"}} {
			if _, err := b.store.EventReceive(t.Context(), p); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("EventReceive(%+v) = %v, want ErrInvalidParams", p, err)
			}
		}
	})

	t.Run("ConcurrentSameKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var mu sync.Mutex
		outcomes := map[ferry.ReceiveOutcome]int{}
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				res, err := b.store.EventReceive(t.Context(), &ferry.EventReceiveParams{Source: "s", EventID: "same", Payload: []byte("x")})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				outcomes[res.Outcome]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if outcomes[ferry.ReceiveNew] != 1 || outcomes[ferry.ReceiveDuplicate] != 15 {
			t.Errorf("outcomes = %v, want 1 new and 15 duplicates", outcomes)
		}
		e, err := b.store.EventGet(t.Context(), &ferry.EventGetParams{Source: "s", EventID: "same"})
		if err != nil {
			t.Fatal(err)
		}
		if e.Deliveries != 16 {
			t.Errorf("deliveries = %d, want 16", e.Deliveries)
		}
	})

	t.Run("EmptyPayloadNoHeaders", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.store.EventReceive(t.Context(), &ferry.EventReceiveParams{Source: "s", EventID: "e"})
		if err != nil {
			t.Fatal(err)
		}
		e := b.get(t, res.ID)
		if len(e.Payload) != 0 || e.Headers != nil || len(e.PayloadSHA256) != 32 {
			t.Errorf("event = %+v, want empty payload, nil headers, a hash", e)
		}
	})

	t.Run("DiskFullLeavesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupConfig(t, &sqlite.Config{MaxPageCount: 40})
		big := []byte(strings.Repeat("x", 16<<10))
		var err error
		var stored int
		for i := range 100 {
			_, err = b.store.EventReceive(t.Context(), &ferry.EventReceiveParams{
				Source: "s", EventID: fmt.Sprint(i), Payload: big,
			})
			if err != nil {
				break
			}
			stored++
		}
		if err == nil {
			t.Fatal("no error from a full database")
		}
		list, lerr := b.store.EventList(t.Context(), &ferry.EventListParams{Limit: 1000})
		if lerr != nil {
			t.Fatal(lerr)
		}
		if len(list.Events) != stored {
			t.Errorf("%d events listed, %d acknowledged: a failed receive left a row", len(list.Events), stored)
		}
	})
}

func TestEventGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.receive(t, "github", "d-1")

	byKey, err := b.store.EventGet(t.Context(), &ferry.EventGetParams{Source: "github", EventID: "d-1"})
	if err != nil {
		t.Fatal(err)
	}
	if byKey.ID != id {
		t.Errorf("by key id = %d, want %d", byKey.ID, id)
	}
	if byKey.FirstDeliveredAt.Location() != time.UTC ||
		!byKey.FirstDeliveredAt.Equal(b.clock.Now().Truncate(time.Microsecond)) ||
		!byKey.NextAttemptAt.Equal(byKey.FirstDeliveredAt) {
		t.Errorf("times = %v, %v; want the clock to the microsecond, UTC", byKey.FirstDeliveredAt, byKey.NextAttemptAt)
	}
	for _, p := range []*ferry.EventGetParams{{ID: id + 100}, {Source: "github", EventID: "nope"}} {
		if _, err := b.store.EventGet(t.Context(), p); !errors.Is(err, ferry.ErrNotFound) {
			t.Errorf("EventGet(%+v) = %v, want ErrNotFound", p, err)
		}
	}
}

func TestReceiptSubscribe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := b.store.ReceiptSubscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.receive(t, "s", "1")
	b.receive(t, "s", "2") // coalesces; must not block
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal after a receipt")
	}
	b.receive(t, "s", "1") // a duplicate makes nothing due
	select {
	case <-ch:
		t.Fatal("signal after a duplicate")
	default:
	}
	cancel()
	for range ch { // closes once ctx is done
	}
}

// sqlExec runs a statement on the write handle.
func sqlExec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatal(err)
	}
}

// TestSharedFile runs two Stores on one file, as two processes would: their
// write transactions wait on SQLite's lock (busy_timeout, BEGIN IMMEDIATE)
// instead of failing, and their claims never overlap.
func TestSharedFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	second, err := sqlite.Open(b.path, &sqlite.Config{Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	stores := []*sqlite.Store{b.store, second}

	var wg sync.WaitGroup
	for i, store := range stores {
		wg.Go(func() {
			for j := range 50 {
				if _, err := store.EventReceive(t.Context(), &ferry.EventReceiveParams{
					Source: "s", EventID: fmt.Sprint(j), Payload: []byte("x"),
				}); err != nil {
					t.Errorf("store %d receive: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()

	var mu sync.Mutex
	seen := map[int64]int{}
	for i, store := range stores {
		wg.Go(func() {
			for {
				claims, err := store.EventClaimMany(t.Context(), &ferry.EventClaimManyParams{Owner: fmt.Sprint(i), Limit: 5, TTL: ttl})
				if err != nil {
					t.Errorf("store %d claim: %v", i, err)
					return
				}
				if len(claims) == 0 {
					return
				}
				mu.Lock()
				for _, c := range claims {
					seen[c.Event.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != 50 {
		t.Errorf("%d events claimed, want 50", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %d claimed %d times", id, n)
		}
	}
	e, err := second.EventGet(t.Context(), &ferry.EventGetParams{Source: "s", EventID: "7"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Deliveries != 2 {
		t.Errorf("deliveries = %d, want 2 (one per store)", e.Deliveries)
	}
}
