package ferry

import (
	"math"
	"testing"
	"time"
)

// backoff stays within [0, min(limit, base × 2^(n-1))] for every n, a
// limit of math.MaxInt64 (no cap) included.
func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	for _, limit := range []time.Duration{time.Hour, math.MaxInt64} {
		for _, n := range []int{1, 2, 10, 40, 62, 63, 64, 1000} {
			ceiling := limit
			if n < 63 && time.Second<<(n-1) > 0 && time.Second<<(n-1) < limit {
				ceiling = time.Second << (n - 1)
			}
			for range 100 {
				if d := backoff(n, time.Second, limit); d < 0 || d > ceiling {
					t.Fatalf("backoff(%d, 1s, %v) = %v, want within [0, %v]", n, limit, d, ceiling)
				}
			}
		}
	}
}
