package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/storetest"
)

// benchStore is a migrated store on the database's own clock.
func benchStore(b *testing.B) *postgres.Store { return teststore.Postgres(b, nil) }

// The store benchmarks are storetest's, so both stores measure the same
// thing (BenchmarkReceiveParallel: the receiver's group commit over
// EventReceiveMany is measured by ferryhttp's
// BenchmarkReceivePostgresParallel).

func BenchmarkReceive(b *testing.B)         { storetest.BenchReceive(b, benchStore) }
func BenchmarkReceiveParallel(b *testing.B) { storetest.BenchReceiveParallel(b, benchStore) }
func BenchmarkCompleteMany(b *testing.B)    { storetest.BenchCompleteMany(b, benchStore) }
func BenchmarkHeartbeatMany(b *testing.B)   { storetest.BenchHeartbeatMany(b, benchStore) }
func BenchmarkFailMany(b *testing.B)        { storetest.BenchFailMany(b, benchStore) }

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
