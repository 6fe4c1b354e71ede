package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// The store benchmarks live here so that both stores measure the same
// thing; each store's tests name them Benchmark<Name> and pass a function
// that opens a fresh, migrated store.

// BenchReceive measures one receipt at a time: one transaction and one
// commit each.
func BenchReceive[S ferry.Store](b *testing.B, newStore func(*testing.B) S) {
	ctx := context.Background()
	store := newStore(b)
	for i := 0; b.Loop(); i++ {
		if _, err := store.EventReceive(ctx, benchReceipt(fmt.Sprintf("evt_%d", i))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchReceiveParallel measures concurrent EventReceive calls, one commit
// each; the receiver batches them through EventReceiveMany.
func BenchReceiveParallel[S ferry.Store](b *testing.B, newStore func(*testing.B) S) {
	ctx := context.Background()
	store := newStore(b)
	var n atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := store.EventReceive(ctx, benchReceipt(fmt.Sprintf("evt_%d", n.Add(1)))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchReceipt(eventID string) *ferry.EventReceiveParams {
	return &ferry.EventReceiveParams{
		Source: "bench", EventID: eventID, Type: "invoice.paid",
		Payload: []byte(`{"id":"evt","type":"invoice.paid","data":{"object":{}}}`),
	}
}

// BenchCompleteMany measures completing 100 claimed events per op: in one
// EventCompleteMany call (one write, one commit), and, to compare, one
// EventComplete each. Receiving and claiming the events is not timed.
func BenchCompleteMany[S ferry.Store](b *testing.B, newStore func(*testing.B) S) {
	benchBatch(b, newStore, "evt_", true, func(ctx context.Context, store S, leases []ferry.Lease) error {
		return wantNoneLost(store.EventCompleteMany(ctx, &ferry.EventCompleteManyParams{Leases: leases}))
	}, func(ctx context.Context, store S, l ferry.Lease) error {
		return store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: l})
	})
}

// BenchHeartbeatMany measures one heartbeat tick of 100 leases: one
// EventHeartbeatMany call, and, to compare, one EventHeartbeat each.
func BenchHeartbeatMany[S ferry.Store](b *testing.B, newStore func(*testing.B) S) {
	benchBatch(b, newStore, "hb", false, func(ctx context.Context, store S, leases []ferry.Lease) error {
		return wantNoneLost(store.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: leases, TTL: time.Minute}))
	}, func(ctx context.Context, store S, l ferry.Lease) error {
		_, err := store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: l, TTL: time.Minute})
		return err
	})
}

// BenchFailMany measures failing 100 claimed events per op: in one
// EventFailMany call, and one EventFail each. Claiming is not timed.
func BenchFailMany[S ferry.Store](b *testing.B, newStore func(*testing.B) S) {
	failure := func(l ferry.Lease) ferry.EventFailParams {
		return ferry.EventFailParams{Lease: l, Error: "500", RetryDelay: time.Hour}
	}
	benchBatch(b, newStore, "fail", true, func(ctx context.Context, store S, leases []ferry.Lease) error {
		failures := make([]ferry.EventFailParams, len(leases))
		for j, l := range leases {
			failures[j] = failure(l)
		}
		_, err := store.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: failures})
		return err
	}, func(ctx context.Context, store S, l ferry.Lease) error {
		f := failure(l)
		_, err := store.EventFail(ctx, &f)
		return err
	})
}

// benchBatch runs a batch benchmark in its two modes: "many", one call for
// 100 leases, and "one_by_one", one call per lease. With fresh, each op
// gets 100 newly claimed leases (receiving and claiming them is not timed);
// without, every op reuses the same ones.
func benchBatch[S ferry.Store](b *testing.B, newStore func(*testing.B) S, prefix string, fresh bool,
	many func(context.Context, S, []ferry.Lease) error, one func(context.Context, S, ferry.Lease) error) {
	const batch = 100
	for _, mode := range []string{"many", "one_by_one"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			store := newStore(b)
			var leases []ferry.Lease
			if !fresh {
				leases = benchLeases(b, store, prefix, batch)
			}
			for i := 0; b.Loop(); i++ {
				if fresh {
					b.StopTimer()
					leases = benchLeases(b, store, fmt.Sprint(prefix, i), batch)
					b.StartTimer()
				}
				if mode == "many" {
					if err := many(ctx, store, leases); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for _, l := range leases {
					if err := one(ctx, store, l); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// wantNoneLost turns a batch call's lost leases into an error.
func wantNoneLost(lost []ferry.Lease, err error) error {
	if err == nil && len(lost) != 0 {
		return fmt.Errorf("lost %d leases", len(lost))
	}
	return err
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
