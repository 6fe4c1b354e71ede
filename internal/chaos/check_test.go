//go:build unix

package chaos

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

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

// TestVerdictReclaimCeiling: a slow reclaim on a loaded machine passes;
// only one far past the lease fails the run.
func TestVerdictReclaimCeiling(t *testing.T) {
	t.Parallel()
	o := &Options{TTL: 2 * time.Second, Handler: "external"}
	for _, tc := range []struct {
		ms   int64
		fail bool
	}{
		{1500, false},
		{9000, false}, // 4.5 × the TTL: a busy 2-core machine
		{32000, false},
		{32001, true},
	} {
		r := &Result{MaxReclaimMS: tc.ms}
		if v := r.Verdict(o); (len(v) > 0) != tc.fail {
			t.Errorf("max_reclaim_ms=%d with ttl 2 s: verdict %q, want fail=%v", tc.ms, v, tc.fail)
		}
	}
}
