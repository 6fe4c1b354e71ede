package chaos

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry"
)

// TestCheckHashesStoredPayload: the checker compares the bytes the store
// holds with the bytes sent, not the payload_sha256 column beside them, so
// a payload changed after its hash was written counts as unexpected.
func TestCheckHashesStoredPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := newEnv(ctx, &Options{Store: "sqlite", Handler: "external"}, "check")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	evs := makeEvents(2, rand.New(rand.NewPCG(1, 2)), "chk")
	for _, ev := range evs {
		if _, err := e.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: ev.src.name, EventID: ev.id, Payload: ev.body}); err != nil {
			t.Fatal(err)
		}
	}
	// The first payload loses its last byte; its payload_sha256 stays.
	if err := e.execSQL(ctx, `UPDATE ferry_event SET payload = substr(payload, 1, length(payload) - 1) WHERE event_id = '`+evs[0].id+`'`); err != nil {
		t.Fatal(err)
	}
	o, err := e.collect(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	r := &Result{}
	check(o, r)
	if r.Unexpected != 1 || !strings.Contains(strings.Join(r.Notes, "\n"), "stored payload of "+evs[0].id+" differs") {
		t.Fatalf("unexpected=%d, notes %q: want the changed payload of %s, and only it", r.Unexpected, r.Notes, evs[0].id)
	}
}
