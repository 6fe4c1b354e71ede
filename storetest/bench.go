package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// BenchHeartbeatMany measures one heartbeat tick of 100 leases: one
// EventHeartbeatMany call, and, to compare, one EventHeartbeat each.
func BenchHeartbeatMany(b *testing.B, newStore func(*testing.B) ferry.Store) {
	const batch = 100
	for _, mode := range []string{"many", "one_by_one"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			store := newStore(b)
			leases := benchLeases(b, store, "hb", batch)
			for b.Loop() {
				if mode == "many" {
					if lost, err := store.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: leases, TTL: time.Minute}); err != nil || len(lost) != 0 {
						b.Fatalf("lost %d, %v", len(lost), err)
					}
					continue
				}
				for _, l := range leases {
					if _, err := store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: l, TTL: time.Minute}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchFailMany measures failing 100 claimed events per op: in one
// EventFailMany call, and one EventFail each. Claiming is not timed.
func BenchFailMany(b *testing.B, newStore func(*testing.B) ferry.Store) {
	const batch = 100
	for _, mode := range []string{"many", "one_by_one"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			store := newStore(b)
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				leases := benchLeases(b, store, fmt.Sprint("fail", i), batch)
				failures := make([]ferry.EventFailParams, len(leases))
				for j, l := range leases {
					failures[j] = ferry.EventFailParams{Lease: l, Error: "500", RetryDelay: time.Hour}
				}
				b.StartTimer()
				if mode == "many" {
					if _, err := store.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: failures}); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for j := range failures {
					if _, err := store.EventFail(ctx, &failures[j]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// benchLeases receives n events and claims them.
func benchLeases(b *testing.B, store ferry.Store, prefix string, n int) []ferry.Lease {
	b.Helper()
	ctx := context.Background()
	for j := range n {
		if _, err := store.EventReceive(ctx, &ferry.EventReceiveParams{
			Source: "bench", EventID: fmt.Sprintf("%s_%d", prefix, j), Payload: []byte(`{}`),
		}); err != nil {
			b.Fatal(err)
		}
	}
	claims, err := store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "bench", Limit: n, TTL: time.Minute})
	if err != nil || len(claims) != n {
		b.Fatalf("claimed %d, %v", len(claims), err)
	}
	leases := make([]ferry.Lease, n)
	for j, c := range claims {
		leases[j] = c.Event.Lease()
	}
	return leases
}
