//go:build unix

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

// TestReplayedCount: dlq reads how many events each replay requeued, and an
// answer it cannot read is an error, not a silent 0.
func TestReplayedCount(t *testing.T) {
	t.Parallel()
	for out, want := range map[string]int{"replayed 1 dead event of stripe\n": 1, "replayed 0 dead events of github\n": 0, "replayed 12 dead events of svix\n": 12} {
		if n, err := replayedCount([]byte(out)); err != nil || n != want {
			t.Errorf("%q: %d, %v; want %d", out, n, err, want)
		}
	}
	if n, err := replayedCount([]byte("ferry events replay: something else\n")); err == nil {
		t.Errorf("an unreadable answer gave %d and no error", n)
	}
}
