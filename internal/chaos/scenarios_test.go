package chaos

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// TestSeedReproducesDraws: the same --seed arms the same crash points and
// gives the sender the same jitter and receivers, so a failing kill run can
// be run again with its choices.
func TestSeedReproducesDraws(t *testing.T) {
	t.Parallel()
	draws := func(seed uint64) []string {
		s := &run{env: &env{opts: &Options{Events: 200}, lines: map[string]int{}}, rng: newRand(seed, 1)}
		var armed atomic.Bool
		armed.Store(true)
		arming := s.crashArming(&armed)
		snd := newSender(nil, giveUp, s.stream())
		var out []string
		for n := range 30 {
			out = append(out, strings.Join(arming(0), ","), snd.backoff(n%8, 0).String(), snd.pick([]string{"a", "b", "c", "d"}))
		}
		return out
	}
	if a, b := draws(42), draws(42); !slices.Equal(a, b) {
		t.Fatalf("seed 42 drew\n%q\nthen\n%q", a, b)
	}
}
