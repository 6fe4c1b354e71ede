package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/sqlite"
)

// benchStore is a migrated store in a fresh file, at synchronous=FULL.
func benchStore(b *testing.B) *sqlite.Store {
	b.Helper()
	store, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	if err := store.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return store
}

// BenchmarkReceive measures one receipt at a time: one transaction, one
// fsync each.
func BenchmarkReceive(b *testing.B) {
	ctx := context.Background()
	store := benchStore(b)
	payload := []byte(`{"id":"evt","type":"invoice.paid","data":{"object":{}}}`)
	for i := 0; b.Loop(); i++ {
		if _, err := store.EventReceive(ctx, &ferry.EventReceiveParams{
			Source: "bench", EventID: fmt.Sprintf("evt_%d", i), Type: "invoice.paid", Payload: payload,
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceiveParallel measures concurrent EventReceive calls, one
// commit each; the receiver batches them through EventReceiveMany.
func BenchmarkReceiveParallel(b *testing.B) {
	ctx := context.Background()
	store := benchStore(b)
	payload := []byte(`{"id":"evt","type":"invoice.paid","data":{"object":{}}}`)
	var n atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := store.EventReceive(ctx, &ferry.EventReceiveParams{
				Source: "bench", EventID: fmt.Sprintf("evt_%d", n.Add(1)), Type: "invoice.paid", Payload: payload,
			}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
