package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// showJSON is `ferry events show --json` of one event.
func showJSON(t *testing.T, cfg, source, eventID string, flags ...string) eventDetail {
	t.Helper()
	stdout, stderr, code := runFerry(t, append([]string{"events", "show", "--config", cfg, "--json", source, eventID}, flags...)...)
	if code != 0 {
		t.Fatalf("show %s %s: exit %d: %s", source, eventID, code, stderr)
	}
	var d eventDetail
	if err := json.Unmarshal([]byte(stdout), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// resolve closes dead and unknown events without running them, names who
// did it in show, and leaves the others with a message that says why; a
// missing id exits 3 after the others are done. doctor then no longer
// fails on them.
func TestEventsResolve(t *testing.T) {
	t.Parallel()
	onEachCLIStore(t, func(t *testing.T, cfg string, open func(now func() time.Time) seeder) {
		ctx := context.Background()
		// evt_unknown: its lease lapsed an hour ago on a hold source.
		s := open(func() time.Time { return time.Now().Add(-time.Hour) })
		receive := func(id string) {
			t.Helper()
			if _, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		receive("evt_unknown")
		if c, err := s.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute}); err != nil || len(c) != 1 {
			t.Fatalf("claim: %v, %v", c, err)
		}
		s.close()
		s = open(time.Now)
		defer s.close()
		if _, err := s.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute, HoldSources: []string{"stripe"}}); err != nil {
			t.Fatal(err)
		}
		receive("evt_dead")
		c, err := s.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute})
		if err != nil || len(c) != 1 {
			t.Fatalf("claim: %v, %v", c, err)
		}
		if _, err := s.store.EventFail(ctx, &ferry.EventFailParams{Lease: c[0].Event.Lease(), Error: "poison", Dead: true}); err != nil {
			t.Fatal(err)
		}
		receive("evt_pending")
		if d := showJSON(t, cfg, "stripe", "evt_unknown"); d.State != "unknown" {
			t.Fatalf("seeded evt_unknown is %s", d.State)
		}

		wantFerry(t, exitNotFound, "resolved stripe evt_dead\nresolved stripe evt_unknown\n",
			"ferry events resolve: stripe evt_nope: no such event; stripe evt_pending (pending): not resolved, only dead or unknown events can be\n",
			"events", "resolve", "--config", cfg, "--actor", "alice", "stripe", "evt_dead", "evt_unknown", "evt_pending", "evt_nope")
		// An event left as it is, with none missing, fails on its own.
		wantFerry(t, exitLeft, "", "ferry events resolve: stripe evt_pending (pending): not resolved, only dead or unknown events can be\n",
			"events", "resolve", "--config", cfg, "--actor", "alice", "stripe", "evt_pending")
		for _, id := range []string{"evt_dead", "evt_unknown"} {
			d := showJSON(t, cfg, "stripe", id)
			if d.State != "done" || len(d.Actions) != 1 || d.Actions[0].Action != ferry.ActionResolve || d.Actions[0].Actor != "alice" || d.Actions[0].At.IsZero() {
				t.Errorf("%s after resolve: state %s, actions %+v; want done, one resolve by alice", id, d.State, d.Actions)
			}
			if len(d.Attempts) != 1 || d.Attempts[0].Outcome == "done" {
				t.Errorf("%s ledger after resolve = %+v, want its one attempt as it was", id, d.Attempts)
			}
			text, _, _ := runFerry(t, "events", "show", "--config", cfg, "stripe", id)
			if !strings.Contains(text, "resolve") || !strings.Contains(text, "alice") {
				t.Errorf("text show of %s lacks the resolve:\n%s", id, text)
			}
		}
		if d := showJSON(t, cfg, "stripe", "evt_pending"); d.State != "pending" || len(d.Actions) != 0 {
			t.Errorf("evt_pending after resolve: %s, actions %+v", d.State, d.Actions)
		}
		out, _, _ := runFerry(t, "doctor", "--config", cfg)
		if strings.Contains(out, "dead event") || strings.Contains(out, "held as unknown") {
			t.Errorf("doctor after resolving every dead and unknown event:\n%s", out)
		}
		if _, stderr, code := runFerry(t, "events", "resolve", "--config", cfg, "--actor", "", "stripe", "evt_pending"); code != exitUsage || !strings.Contains(stderr, "--actor") {
			t.Errorf("resolve --actor '': exit %d, %q; want %d", code, stderr, exitUsage)
		}
	})
}

// retry-now makes a pending event in backoff due now, keeping its budget,
// and records who asked; anything else is left with a message.
func TestEventsRetryNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, s := migratedSQLite(t)
	for _, id := range []string{"evt_backoff", "evt_due"} {
		if _, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute})
	if err != nil || len(c) != 1 || c[0].Event.EventID != "evt_backoff" {
		t.Fatalf("claim: %v, %v", c, err)
	}
	if _, err := s.store.EventFail(ctx, &ferry.EventFailParams{Lease: c[0].Event.Lease(), Error: "503", RetryDelay: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	s.close()
	before := showJSON(t, cfg, "stripe", "evt_backoff")

	const notRetried = "stripe evt_due (pending): not retried, not pending in a backoff (running, finished, or already due; a dead or unknown one: ferry events replay or resolve)\n"
	wantFerry(t, exitNotFound, "retried stripe evt_backoff\n", "ferry events retry-now: stripe evt_nope: no such event; "+notRetried,
		"events", "retry-now", "--config", cfg, "--actor", "alice", "stripe", "evt_backoff", "evt_due", "evt_nope")
	wantFerry(t, exitLeft, "", "ferry events retry-now: "+notRetried, "events", "retry-now", "--config", cfg, "--actor", "alice", "stripe", "evt_due")
	after := showJSON(t, cfg, "stripe", "evt_backoff")
	if after.State != "pending" || after.NextAttemptAt == nil || !after.NextAttemptAt.Before(*before.NextAttemptAt) || after.Attempt != 1 {
		t.Errorf("after retry-now: %+v; was next attempt %v", after, before.NextAttemptAt)
	}
	if len(after.Actions) != 1 || after.Actions[0].Action != ferry.ActionRetryNow || after.Actions[0].Actor != "alice" {
		t.Errorf("actions after retry-now = %+v, want one retry_now by alice", after.Actions)
	}
	if d := showJSON(t, cfg, "stripe", "evt_due"); len(d.Actions) != 0 {
		t.Errorf("evt_due actions = %+v, want none", d.Actions)
	}
}

// retry-now --source makes every pending event of the source that waits out
// a backoff due, records who asked on each, and leaves the due ones and
// other sources' as they are.
func TestEventsRetryNowBySource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, s := migratedSQLite(t)
	inBackoff(t, s.store, "stripe", "evt_a", "evt_b", "evt_c")
	inBackoff(t, s.store, "github", "gh_a")
	if _, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_due", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	s.close()

	wantFerry(t, 0, "retried 3 events of stripe; 1 other pending event left as they are\n", "",
		"events", "retry-now", "--config", cfg, "--actor", "alice", "--source", "stripe")
	for _, id := range []string{"evt_a", "evt_b", "evt_c"} {
		d := showJSON(t, cfg, "stripe", id)
		if len(d.Actions) != 1 || d.Actions[0].Action != ferry.ActionRetryNow || d.Actions[0].Actor != "alice" || d.Attempt != 1 {
			t.Errorf("%s after retry-now --source: %+v, want one retry_now by alice, attempt 1", id, d)
		}
	}
	for source, id := range map[string]string{"stripe": "evt_due", "github": "gh_a"} {
		if d := showJSON(t, cfg, source, id); len(d.Actions) != 0 {
			t.Errorf("%s %s: actions %+v, want none", source, id, d.Actions)
		}
	}
	wantFerry(t, exitUsage, "", "ferry events retry-now: give --source or SOURCE EVENT_ID..., not both\n",
		"events", "retry-now", "--config", cfg, "--source", "stripe", "evt_a")
}

// A bulk action reads the source's events a page at a time and acts on
// every page: five events in backoff, listed two at a time, are all
// retried.
func TestEventsBulkActionReadsEveryPage(t *testing.T) {
	t.Parallel()
	_, s := migratedSQLite(t)
	defer s.close()
	inBackoff(t, s.store, "stripe", "evt_1", "evt_2", "evt_3", "evt_4", "evt_5")
	var out strings.Builder
	if err := eventsRetryNow.each(context.Background(), s.store, &out, "stripe", "alice", 2); err != nil {
		t.Fatal(err)
	}
	if want := "retried 5 events of stripe; 0 other pending events left as they are\n"; out.String() != want {
		t.Errorf("each, two a page: %q, want %q", out.String(), want)
	}
}

// inBackoff receives ids on source and fails each once with a day's
// backoff: pending, not due.
func inBackoff(t *testing.T, st ferry.Store, source string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	var receipts []*ferry.EventReceiveParams
	for _, id := range ids {
		receipts = append(receipts, &ferry.EventReceiveParams{Source: source, EventID: id, Payload: []byte(`{}`)})
	}
	if _, err := st.EventReceiveMany(ctx, &ferry.EventReceiveManyParams{Receipts: receipts}); err != nil {
		t.Fatal(err)
	}
	c, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: len(ids), TTL: time.Minute, Sources: []string{source}})
	if err != nil || len(c) != len(ids) {
		t.Fatalf("claim: %d claims, %v", len(c), err)
	}
	var failures []ferry.EventFailParams
	for _, claim := range c {
		failures = append(failures, ferry.EventFailParams{Lease: claim.Event.Lease(), Error: "503", RetryDelay: 24 * time.Hour})
	}
	if _, err := st.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: failures}); err != nil {
		t.Fatal(err)
	}
}
