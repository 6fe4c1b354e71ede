package ferry_test

import (
	"errors"
	"testing"

	"github.com/ferry-inbox/ferry"
)

// TestReplayAndConflictListLimit: a list reads NoticeKeep rows unless told
// otherwise, so the event page stays bounded however many rows a store
// written before the cap holds.
func TestReplayAndConflictListLimit(t *testing.T) {
	t.Parallel()
	normalize := map[string]func(id int64, limit int) (int, error){
		"ReplayListParams": func(id int64, limit int) (int, error) {
			p := &ferry.ReplayListParams{ID: id, Limit: limit}
			err := p.Normalize()
			return p.Limit, err
		},
		"ConflictListParams": func(id int64, limit int) (int, error) {
			p := &ferry.ConflictListParams{ID: id, Limit: limit}
			err := p.Normalize()
			return p.Limit, err
		},
	}
	for name, f := range normalize {
		for _, tc := range []struct{ in, want int }{{0, ferry.NoticeKeep}, {3, 3}, {5000, 1000}} {
			if got, err := f(1, tc.in); err != nil || got != tc.want {
				t.Errorf("%s{Limit: %d}: %d, %v; want %d", name, tc.in, got, err, tc.want)
			}
		}
		if _, err := f(1, -1); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("%s{Limit: -1}: %v, want ErrInvalidParams", name, err)
		}
		if _, err := f(0, 0); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("%s{ID: 0}: %v, want ErrInvalidParams", name, err)
		}
	}
}
