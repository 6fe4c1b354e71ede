package ferryhttp_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/prometheus"
)

// TestReceiverReplayedBody: GitHub, Shopify and body-mode HMAC sign only
// the body, so a captured delivery re-sent under new ids and another type
// verifies. With replay detection on, each is answered 200 replay, stored
// on the first event and never as an event of its own, counted in
// ferry_received_total{outcome="replay"} and logged as one warning without
// the payload, naming the stored event's row (stored_id).
func TestReceiverReplayedBody(t *testing.T) {
	t.Parallel()
	const window = 72 * time.Hour
	forEachStore(t, func(t *testing.T, open func(testing.TB) ferry.Store) {
		reg := prom.NewRegistry()
		metrics := prometheus.NewMetrics(reg, []string{"stripe", "github", "shopify", "standardwebhooks", "hmac"})
		b := setup(t, open(t), func(o *ferryhttp.ReceiverOptions) {
			o.Observer = metrics
			for i, s := range o.Sources {
				if s.Name == "github" || s.Name == "shopify" || s.Name == "hmac" {
					o.Sources[i].ReplayWindow = window
				}
			}
		})
		const body = `{"BODYMARK":"captured","action":"opened"}`
		storedID := map[string]int64{} // source → the original's row
		for _, tc := range []struct {
			source, originalType string
			original             delivery
			forged               func(id string) delivery
		}{
			{"github", "push", github(githubSecret, "gh-1", body), func(id string) delivery {
				return github(githubSecret, id, body).with("X-GitHub-Event", "delete")
			}},
			{"shopify", "orders/create", shopify(shopifySecret, "shop-1", body), func(id string) delivery {
				return shopify(shopifySecret, id, body).with("X-Shopify-Topic", "orders/cancelled")
			}},
			{"hmac", "thing.happened", hmacDelivery(hmacSecret, "acme-1", body), func(id string) delivery {
				return hmacDelivery(hmacSecret, id, body).with("X-Acme-Event-Type", "thing.deleted")
			}},
		} {
			if r := b.send(t, tc.original); r.status != 200 || !maps.Equal(r.body, accepted) {
				t.Fatalf("%s original: %d %s", tc.source, r.status, r.raw)
			}
			for i := range 5 {
				r := b.send(t, tc.forged(fmt.Sprintf("forged-%d", i)))
				if r.status != 200 || !maps.Equal(r.body, map[string]string{"status": "replay"}) {
					t.Fatalf("%s replay %d: %d %s, want 200 replay", tc.source, i, r.status, r.raw)
				}
			}
			list, err := b.store.EventList(t.Context(), &ferry.EventListParams{Source: tc.source})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Events) != 1 || list.Events[0].Type != tc.originalType || list.Events[0].Replays != 5 {
				t.Fatalf("%s: %d events stored, want the original alone (%s) with 5 replays: %+v", tc.source, len(list.Events), tc.originalType, list.Events)
			}
			storedID[tc.source] = list.Events[0].ID
			replays, err := b.store.ReplayList(t.Context(), &ferry.ReplayListParams{ID: list.Events[0].ID})
			if err != nil || len(replays) != 5 {
				t.Fatalf("%s: %d replays kept, %v; want 5", tc.source, len(replays), err)
			}
			if replays[0].ClaimedEventID != "forged-0" || replays[0].ClaimedType == tc.originalType {
				t.Errorf("%s: replay kept as %s/%s, want forged-0 under the forged type", tc.source, replays[0].ClaimedEventID, replays[0].ClaimedType)
			}
			for _, r := range replays {
				assertNoSignatureHeaders(t, r.Headers)
			}
			if n := receivedTotal(t, reg, tc.source, "replay", ""); n != 5 {
				t.Errorf(`%s: ferry_received_total{outcome="replay"} = %v, want 5`, tc.source, n)
			}
		}

		logs := b.logs.String()
		if strings.Contains(logs, "BODYMARK") {
			t.Errorf("the log quotes a payload:\n%.2000s", logs)
		}
		for _, sig := range sentSignatureHeaders {
			if strings.Contains(logs, sig) {
				t.Errorf("the log names signature header %s", sig)
			}
		}
		warnings := 0
		for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["alert"] == "suspected_replay" {
				warnings++
				source, _ := rec["source"].(string)
				if rec["level"] != "WARN" || rec["outcome"] != "replay" || rec["stored_id"] != float64(storedID[source]) {
					t.Errorf("replay logged as %v, want WARN naming stored_id %d", rec, storedID[source])
				}
			}
		}
		if warnings != 15 {
			t.Errorf("%d suspected_replay warnings, want one per replay (15)", warnings)
		}
	})
}

// TestReceiverAlertsUpToNoticeKeep: a captured body re-sent under fresh ids,
// or other signed bodies under a known id, are answered as ever, but raise
// an alert (a WARN line) only while the store keeps them: ferry.NoticeKeep
// per event, a conflicting payload once. The rest are info lines.
func TestReceiverAlertsUpToNoticeKeep(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) ferry.Store) {
		b := setup(t, open(t), func(o *ferryhttp.ReceiverOptions) {
			for i, s := range o.Sources {
				if s.Name == "github" {
					o.Sources[i].ReplayWindow = 72 * time.Hour
				}
			}
		})
		const body = `{"action":"opened"}`
		if r := b.send(t, github(githubSecret, "gh-1", body)); r.status != 200 || !maps.Equal(r.body, accepted) {
			t.Fatalf("original: %d %s", r.status, r.raw)
		}
		const more = 5
		for i := range ferry.NoticeKeep + more {
			if r := b.send(t, github(githubSecret, fmt.Sprint("forged-", i), body)); r.status != 200 || !maps.Equal(r.body, map[string]string{"status": "replay"}) {
				t.Fatalf("replay %d: %d %s, want 200 replay", i, r.status, r.raw)
			}
		}
		for i := range ferry.NoticeKeep + more {
			// Payloads 0 and 1 come twice: kept once each.
			if r := b.send(t, github(githubSecret, "gh-1", fmt.Sprintf(`{"v":%d}`, i%(ferry.NoticeKeep+more-2)))); r.status != 200 || !maps.Equal(r.body, map[string]string{"status": "conflict"}) {
				t.Fatalf("conflict %d: %d %s, want 200 conflict", i, r.status, r.raw)
			}
		}
		count := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(b.logs.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			count[fmt.Sprint(rec["level"], " ", rec["outcome"], " ", rec["alert"], " ", rec["kept"])]++
		}
		want := map[string]int{
			"INFO accepted <nil> <nil>":                 1,
			"WARN replay suspected_replay <nil>":        ferry.NoticeKeep,
			"INFO replay <nil> false":                   more,
			"WARN conflict conflicting_duplicate <nil>": ferry.NoticeKeep,
			"INFO conflict <nil> false":                 more,
		}
		if !maps.Equal(count, want) {
			t.Errorf("log lines by level, outcome, alert and kept = %v, want %v", count, want)
		}
	})
}
