package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
)

// benchStore is a migrated store on the database's own clock.
func benchStore(b *testing.B) *postgres.Store {
	b.Helper()
	pool, _ := pgtest.Schema(b)
	store := postgres.New(pool, nil)
	b.Cleanup(store.Close)
	if err := store.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return store
}

// BenchmarkReceive measures the receiver's hot path: one new event per op.
func BenchmarkReceive(b *testing.B) {
	ctx := context.Background()
	store := benchStore(b)
	payload := []byte(`{"id":"evt","type":"invoice.paid","data":{"object":{}}}`)
	for i := 0; b.Loop(); i++ {
		_, err := store.EventReceive(ctx, &ferry.EventReceiveParams{
			Source: "bench", EventID: fmt.Sprintf("evt_%d", i), Type: "invoice.paid", Payload: payload,
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimComplete measures one claim of 100 events and their 100
// completions per op.
func BenchmarkClaimComplete(b *testing.B) {
	const batch = 100
	ctx := context.Background()
	store := benchStore(b)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if _, err := store.Pool().Exec(ctx, `
			INSERT INTO ferry_event (source, event_id, payload, payload_sha256, next_attempt_at, first_delivered_at, last_delivered_at)
			SELECT 'bench', $1 || '_' || n, '', '', now(), now(), now() FROM generate_series(1, $2::int) n`,
			fmt.Sprint(i), batch); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		claims, err := store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "bench", Limit: batch, TTL: time.Minute})
		if err != nil || len(claims) != batch {
			b.Fatalf("claimed %d, %v", len(claims), err)
		}
		for _, c := range claims {
			if err := store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkReceiveParallel measures concurrent EventReceive calls, one
// commit each; the receiver's group commit over EventReceiveMany is measured
// by ferryhttp's BenchmarkReceivePostgresParallel.
func BenchmarkReceiveParallel(b *testing.B) {
	ctx := context.Background()
	store := benchStore(b)
	payload := []byte(`{"id":"evt","type":"invoice.paid","data":{"object":{}}}`)
	var n atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, err := store.EventReceive(ctx, &ferry.EventReceiveParams{
				Source: "bench", EventID: fmt.Sprintf("evt_%d", n.Add(1)), Type: "invoice.paid", Payload: payload,
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
