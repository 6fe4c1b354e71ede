package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// BenchmarkCompleteMany measures completing 100 claimed events per op: in
// one EventCompleteMany call (one statement, one commit), and, to compare,
// one EventComplete each. Inserting and claiming the events is not timed.
func BenchmarkCompleteMany(b *testing.B) {
	const batch = 100
	for _, mode := range []string{"many", "one_by_one"} {
		b.Run(mode, func(b *testing.B) {
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
				claims, err := store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "bench", Limit: batch, TTL: time.Minute})
				if err != nil || len(claims) != batch {
					b.Fatalf("claimed %d, %v", len(claims), err)
				}
				leases := make([]ferry.Lease, len(claims))
				for j, c := range claims {
					leases[j] = c.Event.Lease()
				}
				b.StartTimer()
				if mode == "many" {
					lost, err := store.EventCompleteMany(ctx, &ferry.EventCompleteManyParams{Leases: leases})
					if err != nil || len(lost) != 0 {
						b.Fatalf("lost %d, %v", len(lost), err)
					}
					continue
				}
				for _, l := range leases {
					if err := store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: l}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
