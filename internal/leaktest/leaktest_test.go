package leaktest_test

import (
	"testing"

	"github.com/ferry-inbox/ferry/internal/leaktest"
)

// runs is a stand-in for *testing.M: its Run starts what start starts and
// returns code.
type runs struct {
	code  int
	start func()
}

func (r runs) Run() int {
	r.start()
	return r.code
}

// Not parallel: Run looks at every goroutine of the process.
func TestRun(t *testing.T) {
	release := make(chan struct{})
	leaked := make(chan struct{})
	leak := func() {
		go func() {
			close(leaked)
			<-release
		}()
		<-leaked
	}
	for _, tc := range []struct {
		name string
		m    runs
		want int
	}{
		{"CleanPassStaysZero", runs{0, func() {}}, 0},
		{"FailureKeepsItsCode", runs{3, func() {}}, 3},
		{"LeakFailsAPass", runs{0, leak}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaktest.Run(tc.m); got != tc.want {
				t.Errorf("Run = %d, want %d", got, tc.want)
			}
		})
	}
	close(release)
}
