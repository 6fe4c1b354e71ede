package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/testlog"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/sqlite"
	"github.com/ferry-inbox/ferry/storetest"
)

// alertSecret is the secret part of the receiver's URL, as in a Slack
// webhook URL; it must never reach a log line.
const alertSecret = "xoxSECRETab12cd34"

// alertReceiver is a local stand-in for Slack: it records each message it
// answers 2xx, answers 500 to the next failN requests, and, when hold is
// set, closes it at the next request and holds that request until release
// is closed.
type alertReceiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	got      []alertMessage
	requests int
	failN    int
	hold     chan struct{}
	release  chan struct{}
}

// holdFirstPost runs send in its own goroutine and returns once send's
// first POST has reached r and is held there; release lets it be answered
// and waits for send to return.
func (r *alertReceiver) holdFirstPost(t *testing.T, send func()) (release func()) {
	t.Helper()
	hold, held := make(chan struct{}), make(chan struct{})
	r.mu.Lock()
	r.hold, r.release = hold, held
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { send(); close(done) }()
	select {
	case <-hold:
	case <-time.After(30 * time.Second):
		t.Fatal("nothing was sent")
	}
	return func() { close(held); <-done }
}

func newAlertReceiver(t *testing.T) *alertReceiver {
	r := &alertReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/services/T0/B0/"+alertSecret || req.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s %q", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
		}
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.requests++
		hold, release := r.hold, r.release
		r.hold = nil // only the first request after it is set waits
		fail := r.failN > 0
		if fail {
			r.failN--
		}
		r.mu.Unlock()
		if hold != nil {
			close(hold)
			<-release
		}
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var m alertMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Errorf("body %s: %v", body, err)
		}
		r.mu.Lock()
		r.got = append(r.got, m)
		r.mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *alertReceiver) url() string { return r.srv.URL + "/services/T0/B0/" + alertSecret }

// messages returns what arrived since the last call.
func (r *alertReceiver) messages() []alertMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

type alertBundle struct {
	ctx   context.Context
	clock *storetest.Clock
	// open returns another store on the same database: another instance.
	open func(t *testing.T) ferry.Store
	// pool reaches the PostgreSQL schema directly; nil on SQLite.
	pool *pgxpool.Pool
	log  *testlog.Buffer
	recv *alertReceiver
}

// newAlertBundle migrates a fresh database of kind ("sqlite" or
// "postgres") on a fake clock and returns a store on it.
func newAlertBundle(t *testing.T, kind string) (*alertBundle, ferry.Store) {
	b := &alertBundle{ctx: context.Background(), clock: storetest.NewClock(), log: &testlog.Buffer{}, recv: newAlertReceiver(t)}
	switch kind {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "ferry.db")
		b.open = func(t *testing.T) ferry.Store {
			return teststore.OpenSQLite(t, path, &sqlite.Config{Now: b.clock.Now})
		}
	case "postgres":
		var schema string
		b.pool, schema = pgtest.Schema(t)
		b.open = func(t *testing.T) ferry.Store {
			s, err := postgres.Open(b.ctx, pgtest.ConnString(schema), &postgres.Config{Now: b.clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return s
		}
	}
	st := b.open(t)
	if err := st.Migrate(b.ctx); err != nil {
		t.Fatal(err)
	}
	return b, st
}

// pusher is one alerting instance on a store of its own over the shared
// database, checking every 30s and sending at most once per 10m.
func (b *alertBundle) pusher(t *testing.T, url string) *alertPusher {
	p := newAlertPusher(alertPusherOptions{
		Store: b.open(t), URL: url, Sources: []string{"stripe"},
		Params:   &ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{"stripe": 60 * time.Hour}},
		Interval: 10 * time.Minute, Check: 30 * time.Second, PublicURL: "https://ferry-admin.example.com/",
		Log: slog.New(slog.NewJSONHandler(b.log, nil)),
	})
	p.retryBase = time.Millisecond
	return p
}

// eachAlertStore runs test on SQLite and on PostgreSQL, in parallel.
func eachAlertStore(t *testing.T, test func(t *testing.T, b *alertBundle, st ferry.Store)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b, st := newAlertBundle(t, kind)
			test(t, b, st)
			if t.Failed() {
				t.Log(b.log.String())
			}
		})
	}
}

func TestAlertPush(t *testing.T) {
	t.Parallel()
	eachAlertStore(t, testAlertPush)
}

func testAlertPush(t *testing.T, b *alertBundle, st ferry.Store) {
	ctx := b.ctx
	receive := func(id, body string) {
		t.Helper()
		if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	// killPending claims every pending event: id dies, the others are done.
	killPending := func(id string) {
		t.Helper()
		claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "test", Limit: 100, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims {
			var err error
			if c.Event.EventID == id {
				_, err = st.EventFail(ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), Error: "404", Dead: true})
			} else {
				err = st.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	kill := func(id string) {
		t.Helper()
		receive(id, `{"n":"`+id+`"}`)
		killPending(id)
	}
	want := func(step string, want ...string) []alertMessage {
		t.Helper()
		got := b.recv.messages()
		var kinds []string
		for _, m := range got {
			kinds = append(kinds, m.Kind)
		}
		if strings.Join(kinds, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: messages %+v, want kinds %v", step, got, want)
		}
		return got
	}

	// A dead event and a conflicting delivery.
	receive("evt_1", `{"v":1}`)
	receive("evt_1", `{"v":2}`)
	kill("evt_2")

	a, c := b.pusher(t, b.recv.url()), b.pusher(t, b.recv.url())

	t.Run("OneMessagePerAlertFromTwoInstances", func(t *testing.T) {
		// The second instance checks while the first is still POSTing, so
		// only the lease keeps it from sending the same alerts.
		release := b.recv.holdFirstPost(t, func() { a.check(ctx) })
		c.check(ctx)
		release()
		got := want("first check", "dead", "conflicting")
		dead, conflict := got[0], got[1]
		if dead.Source != "stripe" || dead.New != 1 || dead.Total != 1 || strings.Join(dead.EventIDs, ",") != "evt_2" ||
			!strings.HasPrefix(dead.DashboardURL, "https://ferry-admin.example.com/ui/events/") ||
			!strings.Contains(dead.Text, "1 event on stripe is dead") || !strings.Contains(dead.Text, "evt_2") ||
			// evt_2 died of a permanent answer on its first attempt: the
			// text must not say its attempts ran out.
			strings.Contains(dead.Text, "no attempt left") || !strings.Contains(dead.Text, "nothing retries it (a permanent failure") {
			t.Errorf("dead message = %+v", dead)
		}
		if conflict.New != 1 || strings.Join(conflict.EventIDs, ",") != "evt_1" || !strings.Contains(conflict.Text, "1 conflicting delivery on stripe") {
			t.Errorf("conflict message = %+v", conflict)
		}
		a.check(ctx)
		c.check(ctx)
		want("second check, nothing new")
	})

	t.Run("RateLimitedAndRolledUp", func(t *testing.T) {
		receive("evt_1", `{"v":3}`)
		receive("evt_3", `{"v":1}`)
		receive("evt_3", `{"v":2}`)
		a.check(ctx)
		c.check(ctx)
		want("within the interval")
		b.clock.Advance(10 * time.Minute)
		a.check(ctx)
		c.check(ctx)
		m := want("after the interval", "conflicting")[0]
		if m.New != 2 || strings.Join(m.EventIDs, ",") != "evt_1,evt_3" || m.DashboardURL != "https://ferry-admin.example.com/ui/?source=stripe" ||
			!strings.Contains(m.Text, "2 conflicting deliveries on stripe") {
			t.Errorf("rolled-up message = %+v", m)
		}
	})

	t.Run("RestartDoesNotResend", func(t *testing.T) {
		// Both instances are gone; a new one takes over after their lease
		// lapses, with nothing in memory.
		b.clock.Advance(11 * time.Minute)
		fresh := b.pusher(t, b.recv.url())
		fresh.check(ctx)
		want("a new instance, nothing new")
		kill("evt_4")
		fresh.check(ctx)
		if m := want("a new dead event", "dead")[0]; m.New != 1 || m.Total != 2 || strings.Join(m.EventIDs, ",") != "evt_4" {
			t.Errorf("message = %+v, want evt_4 new of 2 dead", m)
		}
	})

	t.Run("FailedPostRetried", func(t *testing.T) {
		fresh := b.pusher(t, b.recv.url())
		b.clock.Advance(11 * time.Minute)
		receive("evt_5", `{"v":1}`)
		receive("evt_5", `{"v":2}`)
		b.recv.mu.Lock()
		b.recv.failN, b.recv.requests = 2, 0
		b.recv.mu.Unlock()
		fresh.check(ctx)
		want("after two 500s", "conflicting")
		b.recv.mu.Lock()
		if b.recv.requests != 3 {
			t.Errorf("requests = %d, want 2 failed and 1 answered", b.recv.requests)
		}
		// Every retry fails: nothing is remembered, so the next check sends.
		b.recv.failN = 100
		b.recv.mu.Unlock()
		receive("evt_6", `{"v":1}`)
		receive("evt_6", `{"v":2}`)
		b.clock.Advance(11 * time.Minute)
		fresh.check(ctx)
		want("receiver down")
		b.recv.mu.Lock()
		b.recv.failN = 0
		b.recv.mu.Unlock()
		fresh.check(ctx)
		if m := want("receiver back", "conflicting")[0]; strings.Join(m.EventIDs, ",") != "evt_6" {
			t.Errorf("message = %+v, want evt_6", m)
		}
	})

	t.Run("SuspectedReplay", func(t *testing.T) {
		fresh := b.pusher(t, b.recv.url())
		b.clock.Advance(11 * time.Minute)
		receive("evt_r", `{"r":1}`)
		// The same body under another id, where the provider signs only the body.
		res, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_r_again", Payload: []byte(`{"r":1}`), ReplayWindow: 72 * time.Hour})
		if err != nil || res.Outcome != ferry.ReceiveReplay {
			t.Fatalf("EventReceive = %+v, %v; want a replay", res, err)
		}
		fresh.check(ctx)
		m := want("a replay", "suspected_replay")[0]
		if m.New != 1 || strings.Join(m.EventIDs, ",") != "evt_r" || !strings.Contains(m.Text, "1 suspected replay on stripe") ||
			m.DashboardURL != fmt.Sprintf("https://ferry-admin.example.com/ui/events/%d", res.ID) {
			t.Errorf("replay message = %+v", m)
		}
		fresh.check(ctx)
		want("the same replay, again")
	})

	t.Run("ReplayedAndDeadAgain", func(t *testing.T) {
		// evt_4 was announced dead; an operator replays it and it dies
		// again: announced again, though its row is the same.
		fresh := b.pusher(t, b.recv.url())
		b.clock.Advance(11 * time.Minute)
		res, err := st.EventList(ctx, &ferry.EventListParams{Source: "stripe", States: []ferry.State{ferry.StateDead}})
		if err != nil {
			t.Fatal(err)
		}
		var id int64
		for _, e := range res.Events {
			if e.EventID == "evt_4" {
				id = e.ID
			}
		}
		if n, err := st.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{id}, Actor: "op"}); err != nil || n != 1 {
			t.Fatalf("requeue of evt_4 (%d) = %d, %v", id, n, err)
		}
		killPending("evt_4")
		fresh.check(ctx)
		if m := want("dead again after a replay", "dead")[0]; m.New != 1 || strings.Join(m.EventIDs, ",") != "evt_4" {
			t.Errorf("message = %+v, want evt_4 new", m)
		}
	})

	t.Run("LeaseLostMidCheckSendsNothing", func(t *testing.T) {
		// The lease lapses while a check reads the store, and another
		// instance takes it: the first sends nothing, the holder sends.
		slow, holder := b.pusher(t, b.recv.url()), b.pusher(t, b.recv.url())
		b.clock.Advance(11 * time.Minute)
		kill("evt_8")
		slow.store = &afterStats{Store: slow.store, then: func() {
			b.clock.Advance(slow.leaseTTL + time.Second)
			if !holder.hold(ctx) {
				t.Error("the other instance could not take the lapsed lease")
			}
		}}
		slow.check(ctx)
		want("the lease lost mid-check")
		holder.check(ctx)
		if m := want("the new holder", "dead")[0]; strings.Join(m.EventIDs, ",") != "evt_8" {
			t.Errorf("message = %+v, want evt_8", m)
		}
	})

	t.Run("LeaseLostMidPostRemembersNothing", func(t *testing.T) {
		// The lease lapses while a message is being POSTed, and another
		// instance takes it and sends its own: the first's late mark must
		// not replace the holder's (the message may repeat, never drop).
		slow, holder := b.pusher(t, b.recv.url()), b.pusher(t, b.recv.url())
		b.clock.Advance(11 * time.Minute)
		kill("evt_9")
		release := b.recv.holdFirstPost(t, func() { slow.check(ctx) })
		b.clock.Advance(slow.leaseTTL + time.Second)
		holder.check(ctx)
		mark := func() string {
			t.Helper()
			cp, err := st.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: "alerts:dead:stripe"})
			if err != nil {
				t.Fatal(err)
			}
			return cp.Value
		}
		held := mark()
		release()
		if got := mark(); got != held {
			t.Errorf("the instance that lost its lease rewrote the holder's mark:\n%s\nwant\n%s", got, held)
		}
		want("both sent", "dead", "dead")
		logs := b.log.String()
		if !strings.Contains(logs, "alert pushed, but another instance took the alerts over") {
			t.Errorf("the lost mark was not logged as a message sent: %s", logs)
		}
		for line := range strings.Lines(logs) {
			if strings.Contains(line, "lease lost") && strings.Contains(line, "alert not pushed") {
				t.Errorf("a message sent was logged as not pushed: %s", line)
			}
		}
	})

	t.Run("SecretNeverLogged", func(t *testing.T) {
		// A receiver that refuses connections: the error names the key, not the URL.
		down := httptest.NewServer(http.NotFoundHandler())
		downURL := down.URL + "/services/T0/B0/" + alertSecret
		down.Close()
		fresh := b.pusher(t, downURL)
		b.clock.Advance(11 * time.Minute)
		kill("evt_7")
		fresh.check(ctx)
		logs := b.log.String()
		if !strings.Contains(logs, "alert not pushed") || !strings.Contains(logs, "POST alerts.url") {
			t.Fatalf("no failed push logged: %s", logs)
		}
		if strings.Contains(logs, alertSecret) {
			t.Errorf("the alerts URL's secret reached the log: %s", logs)
		}
	})
}

// afterStats runs then once EventStats has answered: a check that has
// taken the lease and read the store, before it sends.
type afterStats struct {
	ferry.Store
	then func()
}

func (s *afterStats) EventStats(ctx context.Context, p *ferry.EventStatsParams) (*ferry.EventStats, error) {
	stats, err := s.Store.EventStats(ctx, p)
	s.then()
	return stats, err
}

// TestAlertBeyondTheList: a check lists at most listLimit events or
// notices per kind and source; every source's are still announced.
func TestAlertBeyondTheList(t *testing.T) {
	t.Parallel()
	eachAlertStore(t, testAlertBeyondTheList)
}

func testAlertBeyondTheList(t *testing.T, b *alertBundle, st ferry.Store) {
	ctx := b.ctx
	receive := func(source string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: source, EventID: id, Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// want checks the messages' kind:source and returns them.
	want := func(t *testing.T, step string, want ...string) []alertMessage {
		t.Helper()
		got := b.recv.messages()
		var keys []string
		for _, m := range got {
			keys = append(keys, m.Kind+":"+m.Source)
		}
		if strings.Join(keys, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: messages %+v, want %v", step, got, want)
		}
		return got
	}
	p := b.pusher(t, b.recv.url())
	p.listLimit = 3
	p.sources = []string{"github", "stripe"}
	p.params.AtRiskAfter = map[string]time.Duration{"github": 60 * time.Hour, "stripe": 60 * time.Hour}

	// github's at-risk events are older than any of stripe's, and
	// as many as a list holds.
	receive("github", "g1", "g2", "g3")
	b.clock.Advance(time.Hour)
	receive("stripe", "s1", "s2", "s3")
	b.clock.Advance(time.Hour)
	receive("stripe", "s4", "s5")
	b.clock.Advance(time.Hour)
	receive("stripe", "s6", "s7")
	b.clock.Advance(58*time.Hour + 30*time.Minute)

	t.Run("AtRiskOfEverySource", func(t *testing.T) {
		p.check(ctx)
		got := want(t, "three at risk on each source", "at_risk:github", "at_risk:stripe")
		if m := got[1]; m.New != 3 || m.Total != 3 || strings.Join(m.EventIDs, ",") != "s1,s2,s3" {
			t.Errorf("stripe's message = %+v, want s1, s2, s3 new of 3", m)
		}
	})

	t.Run("NoticesPastAListOfHeldOnes", func(t *testing.T) {
		// A list of one notice, announced and held within the grace:
		// the cursor passes it once it is old, and the next one follows.
		b.clock.Advance(11 * time.Minute)
		one := b.pusher(t, b.recv.url())
		one.listLimit = 1
		receive("stripe", "c1", "c2")
		for _, id := range []string{"c1", "c2"} {
			if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte(`{"v":2}`)}); err != nil {
				t.Fatal(err)
			}
		}
		one.check(ctx)
		if m := want(t, "the first", "conflicting:stripe")[0]; strings.Join(m.EventIDs, ",") != "c1" {
			t.Errorf("message = %+v, want c1", m)
		}
		b.clock.Advance(11 * time.Minute)
		one.check(ctx)
		want(t, "the cursor passes c1")
		one.check(ctx)
		if m := want(t, "the second", "conflicting:stripe")[0]; strings.Join(m.EventIDs, ",") != "c2" {
			t.Errorf("message = %+v, want c2", m)
		}
	})
}

// TestAlertNoticeCommittedLate: PostgreSQL takes a notice's id at insert, so
// a receipt that commits late adds a notice below one already announced. It
// is announced once, after its commit, and the mark keeps no more than that.
func TestAlertNoticeCommittedLate(t *testing.T) {
	t.Parallel()
	b, st := newAlertBundle(t, "postgres")
	ctx := b.ctx
	receive := func(id, body string) int64 {
		t.Helper()
		res, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	want := func(step string, ids string) {
		t.Helper()
		got := b.recv.messages()
		if ids == "" && len(got) == 0 {
			return
		}
		if len(got) != 1 || got[0].Kind != "conflicting" || strings.Join(got[0].EventIDs, ",") != ids {
			t.Fatalf("%s: messages %+v, want one conflicting %q", step, got, ids)
		}
	}
	first := receive("evt_a", `{"v":1}`)
	receive("evt_b", `{"v":1}`)
	p := b.pusher(t, b.recv.url())

	// A conflicting receipt of evt_a, its row inserted and not committed;
	// another of evt_b commits meanwhile, with the higher id.
	slow, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Rollback(ctx) })
	if _, err := slow.Exec(ctx, `INSERT INTO ferry_conflict (event_id, received_at, payload_sha256, payload, headers)
		VALUES ($1, $2, '\x00'::bytea, '{"v":2}'::bytea, '{}'::jsonb)`, first, b.clock.Now()); err != nil {
		t.Fatal(err)
	}
	receive("evt_b", `{"v":2}`)
	p.check(ctx)
	want("the committed one", "evt_b")

	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(11 * time.Minute)
	p.check(ctx)
	want("the late one", "evt_a")
	b.clock.Advance(11 * time.Minute)
	p.check(ctx)
	want("nothing new", "")

	// A new holder, with nothing in memory, sends nothing again.
	fresh := b.pusher(t, b.recv.url())
	b.clock.Advance(11 * time.Minute)
	fresh.check(ctx)
	want("after a failover", "")

	cp, err := st.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: "alerts:conflicting:stripe"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cp.Value, "held") {
		t.Errorf("mark %s holds ids past the grace", cp.Value)
	}
}

// The notice grace outlasts any receipt: a minute, or twice
// http.store_timeout when that is longer.
func TestAlertNoticeGraceOutlastsTheStoreTimeout(t *testing.T) {
	t.Parallel()
	for timeout, want := range map[time.Duration]time.Duration{
		0: time.Minute, 10 * time.Second: time.Minute, 5 * time.Minute: 10 * time.Minute,
	} {
		p := newAlertPusher(alertPusherOptions{Params: &ferry.EventStatsParams{}, StoreTimeout: timeout})
		if p.grace != want {
			t.Errorf("store_timeout %s: grace %s, want %s", timeout, p.grace, want)
		}
	}
}

// Event ids are the provider's, unsigned on some: in an alert each is
// inline code, forming no link, mention or formatting of its own.
func TestAlertTextQuotesEventIDs(t *testing.T) {
	t.Parallel()
	p := &alertPusher{}
	msg := &alertMessage{Source: "github", New: 3, Total: 3, EventIDs: []string{"https://evil.example/reset *URGENT* _now_", "x`, <!channel> & y"}}
	text := p.text(alertRules[1], msg)
	want := ": `https://evil.example/reset *URGENT* _now_`, `x', &lt;!channel&gt; &amp; y` and 1 more"
	if !strings.HasSuffix(text, want) {
		t.Fatalf("text = %q, want it to end %q", text, want)
	}
}

// A message names at most alertNamesShown events, so a burst of deaths
// stays one readable line, and counts the rest.
func TestAlertNamesAFewAndCountsTheRest(t *testing.T) {
	t.Parallel()
	b, st := newAlertBundle(t, "sqlite")
	n := alertNamesShown + 2
	for i := range n {
		deadEvent(t, st, "stripe", fmt.Sprintf("evt_%02d", i), "404")
	}
	b.pusher(t, b.recv.url()).check(b.ctx)
	got := b.recv.messages()
	if len(got) != 1 || got[0].Kind != "dead" {
		t.Fatalf("messages %+v, want one dead", got)
	}
	m := got[0]
	// The newest first, as the dead list reads: evt_11 down to evt_02.
	for i, id := range m.EventIDs {
		if want := fmt.Sprintf("evt_%02d", n-1-i); id != want {
			t.Errorf("names %v, want the newest %d first (evt_%02d down)", m.EventIDs, alertNamesShown, n-1)
			break
		}
	}
	if len(m.EventIDs) != alertNamesShown || m.New != n || m.Total != n ||
		!strings.Contains(m.Text, fmt.Sprintf("%d events on stripe are dead", n)) || !strings.Contains(m.Text, " and 2 more") {
		t.Errorf("message names %d, New %d, Total %d; want %d, %d, %d\n%s", len(m.EventIDs), m.New, m.Total, alertNamesShown, n, n, m.Text)
	}
}

// A stop that comes after a message was sent, before its mark is written,
// does not keep the mark from being written: the next holder of the lease
// would push the message again.
func TestAlertPushRemembersASentMessageAtStop(t *testing.T) {
	t.Parallel()
	b, st := newAlertBundle(t, "sqlite")
	if _, err := st.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte(`{"v":1}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte(`{"v":2}`)}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	p := b.pusher(t, b.recv.url())
	p.store = stopAtMark{Store: p.store, stop: stop}
	p.check(ctx)
	if got := b.recv.messages(); len(got) != 1 {
		t.Fatalf("%d messages sent, want 1", len(got))
	}
	if _, err := st.CheckpointGet(b.ctx, &ferry.CheckpointGetParams{Name: "alerts:conflicting:stripe"}); err != nil {
		t.Errorf("the sent message's mark: %v; want it written\n%s", err, b.log.String())
	}
}

// A sent message whose mark cannot be written (another instance took the
// alerts' lease over) is logged though serve is stopping: it may be pushed
// again.
func TestAlertPushTellsAnUnrememberedMessageAtStop(t *testing.T) {
	t.Parallel()
	b, st := newAlertBundle(t, "sqlite")
	for _, v := range []string{`{"v":1}`, `{"v":2}`} {
		if _, err := st.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	p := b.pusher(t, b.recv.url())
	p.store = stopAtMark{Store: p.store, stop: stop, then: func() {
		b.clock.Advance(time.Hour) // the lease lapses
		if held, err := st.LeaseAcquire(b.ctx, &ferry.LeaseAcquireParams{Name: alertLease, Owner: "other", TTL: time.Hour}); !held || err != nil {
			t.Errorf("another instance's lease: %v, %v", held, err)
		}
	}}
	p.check(ctx)
	if got := b.recv.messages(); len(got) != 1 {
		t.Fatalf("%d messages sent, want 1", len(got))
	}
	if logs := b.log.String(); !strings.Contains(logs, "alert pushed, but another instance took the alerts over") {
		t.Errorf("no warning that the message may be pushed again:\n%s", logs)
	}
}

// stopAtMark is a store on which a stop arrives as an alert's mark is about
// to be written, and then runs then, if set.
type stopAtMark struct {
	ferry.Store
	stop context.CancelFunc
	then func()
}

func (s stopAtMark) CheckpointPut(ctx context.Context, p *ferry.CheckpointPutParams) error {
	if strings.HasPrefix(p.Name, "alerts:") {
		s.stop()
		if s.then != nil {
			s.then()
		}
	}
	return s.Store.CheckpointPut(ctx, p)
}
