package ferry

import (
	"math"
	"testing"
	"time"
)

// backoff draws from [0, min(limit, base × 2^(n-1))] for every n, a limit
// of math.MaxInt64 (no cap) included, and from all of it: the largest of
// 200 draws lies in its top fifth (a miss has odds of 0.8^200). A product
// that overflows must not wrap below the limit.
func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	bases := []time.Duration{time.Second, 16643 * time.Millisecond}
	limits := []time.Duration{time.Hour, 24 * time.Hour, math.MaxInt64}
	for _, base := range bases {
		for _, limit := range limits {
			for _, n := range []int{1, 2, 10, 36, 40, 62, 63, 64, 1000} {
				ceiling := limit
				if exact := float64(base) * math.Pow(2, float64(n-1)); exact < float64(limit) {
					ceiling = time.Duration(exact)
				}
				var most time.Duration
				for range 200 {
					d := backoff(n, base, limit)
					if d < 0 || d > ceiling {
						t.Fatalf("backoff(%d, %v, %v) = %v, want within [0, %v]", n, base, limit, d, ceiling)
					}
					most = max(most, d)
				}
				if float64(most) < 0.8*float64(ceiling) {
					t.Errorf("backoff(%d, %v, %v): largest of 200 draws %v, want near %v", n, base, limit, most, ceiling)
				}
			}
		}
	}
}
