package postgres_test

import (
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/storetest"
)

// The benchmarks are storetest's, so both stores measure the same thing.

func BenchmarkHeartbeatMany(b *testing.B) {
	storetest.BenchHeartbeatMany(b, func(b *testing.B) ferry.Store { return benchStore(b) })
}

func BenchmarkFailMany(b *testing.B) {
	storetest.BenchFailMany(b, func(b *testing.B) ferry.Store { return benchStore(b) })
}
