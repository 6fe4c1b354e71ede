package sqlite_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/sqlite"
)

// openBench opens a migrated store on a temp file with the real clock, so
// every commit pays the WAL fsync a production receipt pays.
func openBench(b *testing.B) *sqlite.Store {
	b.Helper()
	store, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	if err := store.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	return store
}

var benchPayload = []byte(`{"id":"evt_bench","type":"invoice.paid","data":{"object":{"amount":1000}}}`)

// BenchmarkReceive is one durable receipt of a new key per op.
func BenchmarkReceive(b *testing.B) {
	store := openBench(b)
	i := 0
	for b.Loop() {
		i++
		if _, err := store.EventReceive(b.Context(), &ferry.EventReceiveParams{
			Source: "stripe", EventID: fmt.Sprint("evt_", i), Type: "invoice.paid", Payload: benchPayload,
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimComplete is one claim of 100 events and their 100 fenced
// completions per op; receipts are made outside the timer.
func BenchmarkClaimComplete(b *testing.B) {
	const batch = 100
	store := openBench(b)
	ctx := b.Context()
	n := 0
	for b.Loop() {
		b.StopTimer()
		for range batch {
			n++
			if _, err := store.EventReceive(ctx, &ferry.EventReceiveParams{
				Source: "stripe", EventID: fmt.Sprint("evt_", n), Payload: benchPayload,
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		claims, err := store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "bench", Limit: batch, TTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if len(claims) != batch {
			b.Fatalf("claimed %d, want %d", len(claims), batch)
		}
		for _, c := range claims {
			if err := store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
}
