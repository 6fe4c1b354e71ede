package sqlite_test

import (
	"testing"

	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/sqlite"
	"github.com/ferry-inbox/ferry/storetest"
)

// The store benchmarks are storetest's, so both stores measure the same
// thing, on a migrated store in a fresh file at synchronous=FULL.
func benchStore(b *testing.B) *sqlite.Store { return teststore.SQLite(b, nil) }

func BenchmarkReceive(b *testing.B)         { storetest.BenchReceive(b, benchStore) }
func BenchmarkReceiveParallel(b *testing.B) { storetest.BenchReceiveParallel(b, benchStore) }
func BenchmarkCompleteMany(b *testing.B)    { storetest.BenchCompleteMany(b, benchStore) }
func BenchmarkHeartbeatMany(b *testing.B)   { storetest.BenchHeartbeatMany(b, benchStore) }
func BenchmarkFailMany(b *testing.B)        { storetest.BenchFailMany(b, benchStore) }
