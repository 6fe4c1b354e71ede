package ferryhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// TestReceiverLogsNoSecrets sends every kind of delivery through one
// receiver and checks its log: one structured line per delivery, and not one
// secret, signature or payload byte in any of them.
func TestReceiverLogsNoSecrets(t *testing.T) {
	t.Parallel()
	st := teststore.SQLite(t, nil)
	var fail atomic.Bool
	b := setup(t, &failingStore{Store: st, receive: func(ctx context.Context, p *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
		if fail.Load() {
			return nil, errStoreDown
		}
		return st.EventReceive(ctx, p)
	}}, nil)

	// Every body carries a marker no event id or type contains.
	marker := func(n int) string { return fmt.Sprintf("PAYLOAD-MARKER-%02d", n) }
	stripeBody := func(id string, n int) string {
		return `{"id":"` + id + `","type":"invoice.paid","note":"` + marker(n) + `"}`
	}
	other := func(n int) string { return `{"type":"user.created","note":"` + marker(n) + `"}` }

	type step struct {
		d       delivery
		fail    bool // the store fails this one
		outcome string
	}
	steps := []step{
		{d: stripe(stripeBody("evt_log", 1)), outcome: "accepted"},
		{d: stripe(stripeBody("evt_log", 1)), outcome: "duplicate"},
		{d: stripe(stripeBody("evt_log", 2)), outcome: "conflict"},
		{d: github(githubSecret, "gh-log", other(3)), outcome: "accepted"},
		{d: shopify(shopifySecret, "shop-log", other(4)), outcome: "accepted"},
		{d: standardWebhooks(swSecret, "msg_log", other(5), testNow), outcome: "accepted"},
		{d: svix("msg_log_svix", other(6)), outcome: "accepted"},
		{d: hmacDelivery(hmacSecret, "acme-log", other(7)), outcome: "accepted"},
		{d: stripeAt("whsec_wrong-SECRET", stripeBody("evt_log_bad", 8), testNow), outcome: "rejected"},
		{d: github("wrong-SECRET", "gh-log-bad", other(9)), outcome: "rejected"},
		{d: standardWebhooks(swSecret, "msg_log_stale", other(10), testNow.Add(-10*time.Minute)), outcome: "rejected"},
		{d: stripe(`{"type":"x","note":"` + marker(11) + `"}`), outcome: "rejected"},
		{d: stripe(`{"note":"` + marker(12) + `",`), outcome: "rejected"},
		{d: stripe(stripeBody("evt_log_malformed", 13)).with("Stripe-Signature", "t=1,v1=zz-"+marker(13)), outcome: "rejected"},
		// A source name is the sender's to make up: kept out too.
		{d: withSource("nope-"+marker(20), stripe(stripeBody("evt_log_nope", 14))), outcome: "rejected"},
		{d: withMethod(http.MethodPut, stripe(stripeBody("evt_log_put", 15))), outcome: "rejected"},
		{d: chunked(stripe(stripeBody("evt_log_big", 16) + strings.Repeat(" ", 2<<20))), outcome: "rejected"},
		{d: stripe(stripeBody("evt_log_down", 17)), fail: true, outcome: "unavailable"},
	}
	var forbidden []string
	forbidden = append(forbidden, secrets...)
	for i, s := range steps {
		fail.Store(s.fail)
		r := b.send(t, s.d)
		if r.body["status"] != s.outcome {
			t.Fatalf("step %d answered %d %s, want %s", i, r.status, r.raw, s.outcome)
		}
		for _, name := range sentSignatureHeaders {
			forbidden = append(forbidden, signatureParts(s.d.header.Get(name))...)
		}
	}
	b.recv.Drain()
	if r := b.send(t, stripe(stripeBody("evt_log_drain", 19))); r.status != http.StatusServiceUnavailable {
		t.Fatalf("draining answered %d", r.status)
	}
	for n := 1; n <= 20; n++ {
		forbidden = append(forbidden, marker(n))
	}
	b.srv.Close() // waits for every handler, so every line is written

	logs := b.logs.String()
	for _, f := range forbidden {
		if strings.Contains(logs, f) {
			t.Errorf("the log contains %q", f)
		}
	}

	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if len(lines) != len(steps)+1 {
		t.Fatalf("%d log lines for %d deliveries:\n%s", len(lines), len(steps)+1, logs)
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v", i, err)
		}
		for _, key := range []string{"source", "event_id", "outcome", "status", "latency"} {
			if _, ok := rec[key]; !ok {
				t.Errorf("line %d has no %s: %s", i, key, line)
			}
		}
		if i < len(steps) && rec["outcome"] != steps[i].outcome {
			t.Errorf("line %d outcome = %v, want %s", i, rec["outcome"], steps[i].outcome)
		}
	}
	var first, conflictLine, downLine map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[2]), &conflictLine)
	_ = json.Unmarshal([]byte(lines[len(steps)-1]), &downLine)
	if first["source"] != "stripe" || first["event_id"] != "evt_log" {
		t.Errorf("first line = %v, want source stripe and event_id evt_log", first)
	}
	if conflictLine["alert"] != "conflicting_duplicate" || conflictLine["level"] != "WARN" {
		t.Errorf("conflict line = %v, want a WARN with an alert", conflictLine)
	}
	if downLine["err"] != errStoreDown.Error() || downLine["level"] != "WARN" {
		t.Errorf("503 line = %v, want a WARN with the store's error", downLine)
	}
}

// signatureParts returns a signature header's value and every long piece of
// it (the MACs without their "v1=" or "sha256=" dressing).
func signatureParts(value string) []string {
	if value == "" {
		return nil
	}
	parts := []string{value}
	for _, p := range strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == '=' || r == ' ' }) {
		if len(p) >= 16 {
			parts = append(parts, p)
		}
	}
	return parts
}
