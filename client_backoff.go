package ferry

import (
	"math"
	"math/rand/v2"
	"time"
)

// backoff is exponential with full jitter: a random time in [0, min(limit,
// base × 2^(n-1))]. n ≤ 0 waits base.
func backoff(n int, base, limit time.Duration) time.Duration {
	if n <= 0 {
		return base
	}
	ceiling := limit
	// Compared before shifting: base << (n-1) may overflow.
	if n < 63 && base > 0 && base <= limit>>(n-1) {
		ceiling = base << (n - 1)
	}
	if ceiling == math.MaxInt64 { // a limit meaning "none": ceiling+1 would wrap
		return rand.N(ceiling)
	}
	return rand.N(ceiling + 1)
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}
