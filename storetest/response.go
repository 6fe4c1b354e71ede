package storetest

import (
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry"
)

// testResponse checks that what a downstream answered reaches the attempt
// ledger through EventFail, EventComplete, EventCompleteTx and
// EventCompleteMany, and that an attempt without one records none.
func testResponse[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	b := setup(t)
	failed := receive(t, b, "stripe", "failed")
	single := receive(t, b, "stripe", "single")
	inTx := receive(t, b, "stripe", "tx")
	many1 := receive(t, b, "stripe", "many1")
	many2 := receive(t, b, "stripe", "many2")
	leases := map[int64]ferry.Lease{}
	for _, c := range claim(t, b, "w1", 10) {
		leases[c.Event.ID] = c.Event.Lease()
	}
	long := strings.Repeat("é", ferry.ResponseLimit) // two bytes a rune: cut on a rune boundary
	unavailable := ferry.NewAttemptResponse(503, []byte(`{"error":"down`+"\x00\xff"+`"}`))
	if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: leases[failed], Error: "app 503", Response: unavailable}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: leases[single], Response: ferry.NewAttemptResponse(201, []byte(long))}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.InTx(b.ctx, func(tx TX) error {
		return b.store.EventCompleteTx(b.ctx, tx, &ferry.EventCompleteParams{Lease: leases[inTx], Response: ferry.NewAttemptResponse(204, nil)})
	}); err != nil {
		t.Fatal(err)
	}
	lost, err := b.store.EventCompleteMany(b.ctx, &ferry.EventCompleteManyParams{
		Leases:    []ferry.Lease{leases[many1], leases[many2]},
		Responses: []ferry.AttemptResponse{ferry.NewAttemptResponse(200, []byte("ok")), {}},
	})
	if err != nil || len(lost) != 0 {
		t.Fatalf("complete many: lost %v, %v", lost, err)
	}

	for _, tc := range []struct {
		id     int64
		status int
		body   string
	}{
		{failed, 503, `{"error":"down` + "\uFFFD\uFFFD" + `"}`},
		{single, 201, strings.Repeat("é", ferry.ResponseLimit/2)},
		{inTx, 204, ""},
		{many1, 200, "ok"},
		{many2, 0, ""},
	} {
		ledger := attempts(t, b, tc.id)
		if len(ledger) != 1 || ledger[0].HTTPStatus != tc.status || ledger[0].Response != tc.body {
			t.Errorf("event %d ledger = %+v, want status %d response %q", tc.id, ledger[0], tc.status, tc.body)
		}
	}
}
