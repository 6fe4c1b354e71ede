package ferryhttp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/testhttp"
)

// An event catch-up fetched says so on its page; a delivered one does not.
func TestDashboardShowsCaughtUp(t *testing.T) {
	t.Parallel()
	b := setupDashboard(t, ferryhttp.DashboardOptions{}, ferryhttp.AdminOptions{})
	res, err := b.store.EventReceive(context.Background(), &ferry.EventReceiveParams{
		Source: "stripe", EventID: "evt_caught", Payload: []byte(`{}`), Origin: ferry.OriginCatchup,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, body := testhttp.Get(t, b.server.URL+"/ui/events/"+itoa(res.ID))
	if !strings.Contains(body, `id="origin"`) || !strings.Contains(body, "caught up") {
		t.Fatalf("caught-up event page lacks its origin:\n%s", body)
	}
	_, body = testhttp.Get(t, b.server.URL+"/ui/events/"+itoa(b.ids["gh_1"]))
	if strings.Contains(body, `id="origin"`) {
		t.Fatal("a delivered event's page says it was caught up")
	}
}
