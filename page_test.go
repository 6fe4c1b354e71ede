package ferry_test

import (
	"testing"

	"github.com/ferry-inbox/ferry"
)

// Page takes params as Normalize returns them; a Limit left at zero is the
// default, never a panic.
func TestEventListPageTakesTheDefaultLimit(t *testing.T) {
	t.Parallel()
	listed := make([]*ferry.Event, ferry.EventListLimitDefault+1)
	for i := range listed {
		listed[i] = &ferry.Event{ID: int64(len(listed) - i)} // newest first
	}
	page := (&ferry.EventListParams{}).Page(listed)
	if len(page.Events) != ferry.EventListLimitDefault || page.NextBefore != listed[ferry.EventListLimitDefault-1].ID || page.NextAfter != 0 {
		t.Errorf("page of %d, next before %d, after %d; want %d, %d, 0",
			len(page.Events), page.NextBefore, page.NextAfter, ferry.EventListLimitDefault, listed[ferry.EventListLimitDefault-1].ID)
	}
}
