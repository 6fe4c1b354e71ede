package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/config"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/provider"
)

// downstream is the user's app: it records every forwarded request.
type downstream struct {
	mu       sync.Mutex
	requests []*http.Request
	bodies   [][]byte
	answer   func(n int, r *http.Request) int // n counts requests from 1
}

func newDownstream(t *testing.T, answer func(n int, r *http.Request) int) (*downstream, *httptest.Server) {
	d := &downstream{answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d.mu.Lock()
		d.requests = append(d.requests, r)
		d.bodies = append(d.bodies, body)
		n := len(d.requests)
		d.mu.Unlock()
		w.WriteHeader(d.answer(n, r))
	}))
	t.Cleanup(srv.Close)
	return d, srv
}

func (d *downstream) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.requests)
}

// hangOnFirst starts a downstream whose first request hangs until it is
// cancelled (its worker dies or gives up on it), and whose later ones answer
// 200; handling closes when the first arrives.
func hangOnFirst(t *testing.T) (handling <-chan struct{}, srv *httptest.Server) {
	first := make(chan struct{})
	_, srv = newDownstream(t, func(n int, r *http.Request) int {
		if n == 1 {
			close(first)
			<-r.Context().Done()
		}
		return http.StatusOK
	})
	return first, srv
}

// okOnTheThirdTry answers a downstream's first two requests 500, then 200.
func okOnTheThirdTry(n int, _ *http.Request) int {
	if n <= 2 {
		return http.StatusInternalServerError
	}
	return http.StatusOK
}

func TestServe(t *testing.T) {
	t.Parallel()

	// Run as a user builds it, with every chaos variable set: a fault
	// switch would crash the worker, delay it, swap the forwarder or mark
	// the event done before the app answers.
	t.Run("ForwardsSignedAndRetriesUntil2xx", func(t *testing.T) {
		t.Parallel()
		app, appSrv := newDownstream(t, okOnTheThirdTry)
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		p := startServeWith(t, ferryBin, []string{"FERRY_CHAOS_BROKEN=mark-done-first", "FERRY_CHAOS_CRASH_POINT=after-claim:1",
			"FERRY_CHAOS_HANDLER=tx-effect", "FERRY_CHAOS_HANDLER_DELAY=10m"}, writeConfig(t, "sqlite:"+dbPath, appSrv.URL+"/hooks", ""))
		sendStripeOK(t, p.addr, "evt_fwd")
		st := teststore.OpenSQLite(t, dbPath, nil)
		waitDone(t, st, "evt_fwd")

		if n := app.count(); n != 3 {
			t.Fatalf("app got %d requests, want 3 (500, 500, 200)", n)
		}
		// Each secret of forward.secrets signs: an app that knows either
		// one alone verifies every request, whichever side of the roll.
		var verifiers []ferry.Verifier
		for _, secret := range []string{forwardSecret, forwardSecretNext} {
			v, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{secret}})
			if err != nil {
				t.Fatal(err)
			}
			verifiers = append(verifiers, v)
		}
		wantBody := fmt.Sprintf(`{"id":%q,"type":"invoice.paid","data":{}}`, "evt_fwd")
		for i, r := range app.requests {
			h := r.Header
			if h.Get("Idempotency-Key") != ferry.IdempotencyKey("stripe", "evt_fwd") || h.Get("Ferry-Event-Id") != "evt_fwd" ||
				h.Get("Ferry-Source") != "stripe" || h.Get("Ferry-Attempt") != fmt.Sprint(i+1) || h.Get("Ferry-Event-Type") != "invoice.paid" ||
				h.Get("Content-Type") != "application/json" || r.URL.Path != "/hooks" {
				t.Errorf("request %d headers: %v", i+1, h)
			}
			if string(app.bodies[i]) != wantBody {
				t.Errorf("request %d body %q, want the original bytes", i+1, app.bodies[i])
			}
			for j, v := range verifiers {
				if _, err := v.Verify(h, app.bodies[i]); err != nil {
					t.Errorf("request %d signature under secret %d: %v", i+1, j, err)
				}
			}
		}
		ev := eventState(t, st, "evt_fwd")
		var got []string
		for _, o := range outcomes(t, st, ev.ID) {
			got = append(got, strings.Split(o, "@")[0])
		}
		if !slices.Equal(got, []string{"failed", "failed", "done"}) {
			t.Errorf("ledger = %v", got)
		}
		if code := sendStripe(t, p.addr, "evt_fwd"); code != http.StatusOK {
			t.Errorf("redelivery answered %d", code)
		}
		// The redelivery was stored before its 200: had it requeued the done
		// event, the event would now be pending, running or at attempt 4.
		if ev := eventState(t, st, "evt_fwd"); ev.State != ferry.StateDone || ev.Attempt != 3 || ev.Deliveries != 2 {
			t.Errorf("after a redelivery the done event is %s at attempt %d with %d deliveries, want done, 3, 2", ev.State, ev.Attempt, ev.Deliveries)
		}
		if n := app.count(); n != 3 {
			t.Errorf("a redelivery of a done event was forwarded again: %d requests", n)
		}
	})

	// The control for the test above: the chaos build does honour
	// FERRY_CHAOS_BROKEN, so the same setup there ends after one attempt.
	t.Run("ChaosBuildHonoursBrokenMode", func(t *testing.T) {
		t.Parallel()
		app, appSrv := newDownstream(t, okOnTheThirdTry)
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		p := startServeWith(t, chaosBin, []string{"FERRY_CHAOS_BROKEN=mark-done-first"}, writeConfig(t, "sqlite:"+dbPath, appSrv.URL+"/hooks", ""))
		sendStripeOK(t, p.addr, "evt_broken")
		st := teststore.OpenSQLite(t, dbPath, nil)
		waitFor(t, 30*time.Second, "the app to be called", func() bool { return app.count() == 1 })
		waitFor(t, 30*time.Second, "the attempt to end", func() bool {
			ev := eventState(t, st, "evt_broken")
			return ev != nil && ev.State == ferry.StateDone && len(outcomes(t, st, ev.ID)) == 1
		})
		if ev := eventState(t, st, "evt_broken"); ev.Attempt != 1 {
			t.Errorf("mark-done-first: attempt %d, want 1 (done before the app failed)", ev.Attempt)
		}
	})

	t.Run("SIGKILLedWorkersEventIsReclaimedWithinTTL", func(t *testing.T) {
		t.Parallel()
		pool, schema := pgtest.Schema(t)
		st := postgres.New(pool, nil)
		handling, appSrv := hangOnFirst(t) // the first worker hangs in the work until it dies
		// Long enough that a busy machine's stalls cannot lapse the first
		// worker's lease before it is killed.
		const ttl = 5 * time.Second
		cfg := writeConfig(t, pgtest.ConnString(schema), appSrv.URL, `lease_ttl = "5s"`+"\n"+`heartbeat = "1s"`)
		first := startServe(t, cfg)
		sendStripeOK(t, first.addr, "evt_kill")
		select {
		case <-handling:
		case <-time.After(30 * time.Second):
			t.Fatal("the first worker never forwarded the event")
		}
		startServe(t, cfg) // the survivor, polling while the first holds the lease
		before, err := st.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_kill"})
		if err != nil {
			t.Fatal(err)
		}
		if before.State != ferry.StateInProgress || before.Attempt != 1 {
			t.Fatalf("before the kill the event is %s at attempt %d, want the first worker's attempt 1 running", before.State, before.Attempt)
		}
		leaseEnd := before.LeaseExpiresAt // on the database's clock; a later heartbeat only moves it on
		if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var ev *ferry.Event
		waitFor(t, 60*time.Second, "the survivor to complete the event", func() bool {
			ev = eventState(t, st, "evt_kill")
			return ev != nil && ev.State == ferry.StateDone
		})
		attempts, err := st.AttemptList(context.Background(), &ferry.AttemptListParams{ID: ev.ID})
		if err != nil || len(attempts) != 2 {
			t.Fatalf("attempts %v, %v: want the dead worker's and the survivor's", attempts, err)
		}
		// Both sides on the database's clock: never before the lease ended
		// (fencing), and soon after it. The ceiling is generous so that a
		// starved survivor on a busy machine passes; a reclaim that waits
		// for anything but the lease (a backoff, a restart) exceeds it.
		reclaim := attempts[1].StartedAt.Sub(leaseEnd)
		t.Logf("survivor claimed %v after the dead worker's lease ended (ttl %v)", reclaim, ttl)
		if reclaim < 0 {
			t.Errorf("survivor claimed %v before the lease ended", -reclaim)
		}
		if ceiling := ttl + 20*time.Second; reclaim > ceiling {
			t.Errorf("survivor claimed %v after the lease ended, want within %v", reclaim, ceiling)
		}
		ledger := outcomes(t, st, ev.ID)
		if len(ledger) != 2 || !strings.HasPrefix(ledger[0], "lease_expired@") || !strings.HasPrefix(ledger[1], "done@") ||
			strings.Split(ledger[0], "@")[1] == strings.Split(ledger[1], "@")[1] {
			t.Errorf("ledger = %v, want the dead worker's lease_expired then the survivor's done", ledger)
		}
	})

	t.Run("SIGTERMExitsZeroAndReleases", func(t *testing.T) {
		t.Parallel()
		pool, schema := pgtest.Schema(t)
		st := postgres.New(pool, nil)
		handling, appSrv := hangOnFirst(t) // slower than the grace period
		// The default grace (10 s), as most deployments run: the release
		// must come after it, not race its end.
		cfg := writeConfig(t, pgtest.ConnString(schema), appSrv.URL, "")
		p := startServe(t, cfg)
		sendStripeOK(t, p.addr, "evt_term")
		<-handling
		// While the workers stop, the receiver still stores: /readyz
		// fails, so traffic moves away, but what arrives is kept.
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitReadyzFails(t, p)
		sendStripeOK(t, p.addr, "evt_term_late")
		p.wait(t)
		var exitErr *exec.ExitError
		if errors.As(p.err, &exitErr) {
			t.Fatalf("exit code %d after SIGTERM, want 0", exitErr.ExitCode())
		}
		claims, err := st.EventClaimMany(context.Background(), &ferry.EventClaimManyParams{Owner: "another-instance", Limit: 10, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(claims, func(c *ferry.Claim) bool { return c.Event.EventID == "evt_term" })
		if i < 0 {
			t.Fatalf("released event not claimable at once: %d claims", len(claims))
		}
		if eventState(t, st, "evt_term_late") == nil {
			t.Fatal("the delivery answered 200 while the workers stopped is not stored")
		}
		ledger := outcomes(t, st, claims[i].Event.ID)
		if !strings.HasPrefix(ledger[0], "released@") {
			t.Errorf("ledger = %v, want the first attempt released", ledger)
		}
		if log := p.log(); strings.Contains(log, "did not stop in time") {
			t.Errorf("the workers' stop ran out of time:\n%s", log)
		}
	})

	// While a migration waits (here on a lock another session holds),
	// /healthz answers 200, so an orchestrator does not restart the process
	// for a long migration, while /readyz and deliveries answer 503; once
	// migrated, it serves. SIGTERM while starting exits 0.
	t.Run("AnswersHealthWhileStarting", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		pool, schema := pgtest.Schema(t)
		if err := postgres.New(pool, nil).Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		hold := func(table string) pgx.Tx {
			t.Helper()
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(ctx) })
			if _, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			return tx
		}
		_, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
		cfg := writeConfig(t, pgtest.ConnString(schema), appSrv.URL, "")
		start := func() (p *serveProc, addr, admin string) {
			t.Helper()
			p = launchServe(t, ferryBin, nil, cfg)
			select {
			case addrs := <-p.starting:
				return p, addrs[0], addrs[1]
			case <-p.exited:
				t.Fatalf("ferry serve exited at start: %v\n%s", p.err, p.log())
			case <-time.After(60 * time.Second):
				t.Fatalf("ferry serve not listening after 60 s:\n%s", p.log())
			}
			return nil, "", ""
		}
		status := func(addr, path string) int {
			t.Helper()
			code, _ := testhttp.Get(t, "http://"+addr+path)
			return code
		}

		lock := hold("ferry_migration")
		p, addr, admin := start()
		if code := status(addr, "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz while migrating = %d, want 200", code)
		}
		if code := status(addr, "/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz while migrating = %d, want 503", code)
		}
		if code := sendStripe(t, addr, "evt_early"); code != http.StatusServiceUnavailable {
			t.Errorf("a delivery while migrating = %d, want 503", code)
		}
		// The admin listener answers too; a hang is the defect, so the
		// request has a ceiling only a hang reaches.
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		scrape, err := http.NewRequestWithContext(waitCtx, http.MethodGet, "http://"+admin+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := testhttp.Do(t, scrape); code != http.StatusServiceUnavailable {
			t.Errorf("admin /metrics while migrating = %d, want 503", code)
		}
		if err := lock.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.serving:
		case <-time.After(60 * time.Second):
			t.Fatalf("not serving 60 s after the migration lock went:\n%s", p.log())
		}
		if code := status(addr, "/readyz"); code != http.StatusOK {
			t.Errorf("/readyz once serving = %d, want 200", code)
		}
		if code := status(admin, "/metrics"); code != http.StatusOK {
			t.Errorf("admin /metrics once serving = %d, want 200", code)
		}
		sendStripeOK(t, addr, "evt_late")

		lock = hold("ferry_migration")
		p, _, _ = start()
		p.terminate(t)
		if p.err != nil {
			t.Errorf("SIGTERM while migrating: %v, want exit 0\n%s", p.err, p.log())
		}
		if err := lock.Rollback(ctx); err != nil {
			t.Fatal(err)
		}

		// SIGTERM while the first archive pass waits for its lease: exit 0,
		// never serving.
		lock = hold("ferry_lease")
		var holder int
		if err := lock.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
			t.Fatal(err)
		}
		p, _, _ = start()
		waitFor(t, 60*time.Second, "the archive pass to wait for the lease", func() bool {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		})
		p.terminate(t)
		if p.err != nil || strings.Contains(p.log(), "ferry: serving") {
			t.Errorf("SIGTERM during the first archive pass: %v, want exit 0 before serving\n%s", p.err, p.log())
		}
	})

	// SIGHUP stops ferry as SIGTERM does, and a receiver, which has no
	// workers to wait for, still gives up the leases of its background
	// tasks (here the alert pusher's) before it closes the store.
	t.Run("SIGHUPStopsAReceiverAndReleasesItsLeases", func(t *testing.T) {
		t.Parallel()
		hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		t.Cleanup(hook.Close)
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		cfg := writeConfig(t, "sqlite:"+dbPath, "http://127.0.0.1:1", "")
		writeFile(t, cfg, readFile(t, cfg)+fmt.Sprintf("[alerts]\nurl = %q\n", hook.URL))
		p := startServe(t, cfg, "--role", "receiver")
		st := teststore.OpenSQLite(t, dbPath, nil)
		held := func() int {
			var n int
			if err := st.DB().QueryRow(`SELECT count(*) FROM ferry_lease WHERE name = 'alerts'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		waitFor(t, 30*time.Second, "the alert pusher to take its lease", func() bool { return held() == 1 })
		p.stop(t, syscall.SIGHUP)
		if p.err != nil {
			t.Fatalf("exit after SIGHUP: %v, want 0\n%s", p.err, p.log())
		}
		if n := held(); n != 0 {
			t.Errorf("the alerts lease is still held after a clean stop (%d rows)", n)
		}
	})

	// After a stop signal, http.shutdown_delay keeps the receiver storing
	// deliveries while /readyz fails, so a load balancer moves traffic away
	// before the listener closes; a second signal ends the delay. A
	// receiver has no workers whose stop would hold the listener open.
	t.Run("StoresThroughTheShutdownDelay", func(t *testing.T) {
		t.Parallel()
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		cfg := writeServeConfigHTTP(t, "sqlite:"+dbPath, `shutdown_delay = "10m"`, fmt.Sprintf("[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [%q]\n", stripeSecret))
		p := startServe(t, cfg, "--role", "receiver")
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitReadyzFails(t, p)
		sendStripeOK(t, p.addr, "evt_after_sigterm")
		p.stop(t, syscall.SIGTERM) // 60 s at the most, against a 10 m delay
		if p.err != nil || !strings.Contains(p.log(), "a second signal") {
			t.Fatalf("exit after the second signal: %v, want 0 and the delay cut short\n%s", p.err, p.log())
		}
		if ev := eventState(t, teststore.OpenSQLite(t, dbPath, nil), "evt_after_sigterm"); ev == nil {
			t.Fatal("the delivery answered 200 during the delay is not stored")
		}
	})

	// A second stop signal ends the workers' grace too: the handler still
	// forwarding is cancelled, its event released to run again, and the
	// process exits.
	t.Run("SecondSignalEndsTheGrace", func(t *testing.T) {
		t.Parallel()
		app, taken := neverAnswers(t)
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		cfg := writeServeConfig(t, "sqlite:"+dbPath, fmt.Sprintf("shutdown_grace = \"10m\"\n[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [%q]\n[source.forward]\nurl = %q\nsecret = %q\ntimeout = \"10m\"\n", stripeSecret, "http://"+app, forwardSecret))
		p := startServe(t, cfg)
		sendStripeOK(t, p.addr, "evt_held")
		select {
		case <-taken:
		case <-time.After(60 * time.Second):
			t.Fatalf("the event was not forwarded within 60 s:\n%s", p.log())
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the shutdown to begin", func() bool { return strings.Contains(p.log(), "ferry: shutting down") })
		p.stop(t, syscall.SIGTERM) // 60 s at the most, against a 10 m grace
		if p.err != nil || !strings.Contains(p.log(), "cancelling the running handlers") {
			t.Fatalf("exit after the second signal: %v, want 0 and the grace cut short\n%s", p.err, p.log())
		}
		if ev := eventState(t, teststore.OpenSQLite(t, dbPath, nil), "evt_held"); ev == nil || ev.State != ferry.StatePending {
			t.Fatalf("the event cut off: %+v, want released to pending", ev)
		}
	})

	// A worker-only process stores nothing, so it does not sit out the
	// delay a shared config sets for receivers: one signal stops it.
	t.Run("AWorkerHasNoShutdownDelay", func(t *testing.T) {
		t.Parallel()
		_, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		cfg := writeServeConfigHTTP(t, "sqlite:"+dbPath, `shutdown_delay = "10m"`, fmt.Sprintf("[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [%q]\n[source.forward]\nurl = %q\nsecret = %q\n", stripeSecret, appSrv.URL, forwardSecret))
		p := startServe(t, cfg, "--role", "worker")
		p.terminate(t) // 60 s at the most, against a 10 m delay
		if p.err != nil || !strings.Contains(p.log(), `"shutdown_delay":"0s"`) {
			t.Fatalf("exit after SIGTERM: %v, want 0 with no delay\n%s", p.err, p.log())
		}
	})

	// A receiver-only process stores and never works: every attempt in the
	// ledger is the worker process's. The receiver had every chance to take
	// the events first: its own receipts wake it in-process, while the worker
	// starts only after all of them are stored.
	t.Run("SplitRoles", func(t *testing.T) {
		t.Parallel()
		app, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		cfg := writeConfig(t, "sqlite:"+dbPath, appSrv.URL, "")
		receiver := startServe(t, cfg, "--role", "receiver")
		const n = 5
		for i := range n {
			sendStripeOK(t, receiver.addr, fmt.Sprint("evt_split_", i))
		}
		worker := startServe(t, cfg, "--role", "worker")
		st := teststore.OpenSQLite(t, dbPath, nil)
		byWorker := fmt.Sprintf("-%d-", worker.cmd.Process.Pid) // worker ids are host-pid-random
		for i := range n {
			var ev *ferry.Event
			waitFor(t, 30*time.Second, "the worker to forward", func() bool {
				ev = eventState(t, st, fmt.Sprint("evt_split_", i))
				return ev != nil && ev.State == ferry.StateDone
			})
			if ledger := outcomes(t, st, ev.ID); len(ledger) != 1 || !strings.Contains(ledger[0], byWorker) {
				t.Errorf("%s ledger = %v, want one attempt by the worker process (%s)", ev.EventID, ledger, byWorker)
			}
		}
		if got := app.count(); got != n {
			t.Errorf("app got %d requests, want %d", got, n)
		}
	})

	t.Run("BadConfigStopsTheStart", func(t *testing.T) {
		t.Parallel()
		cfg := writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "x.db"), "http://127.0.0.1:1", "")
		raw := strings.Replace(readFile(t, cfg), `name = "stripe"`, "name = \"stripe\"\nreplay_window = \"72h\"\nretention = \"1h\"", 1)
		bad := filepath.Join(t.TempDir(), "bad.toml")
		writeFile(t, bad, raw)
		_, stderr, code := runFerry(t, "serve", "--config", bad)
		if code != 2 || !strings.Contains(stderr, "retention") || !strings.Contains(stderr, "use at least 72h") {
			t.Fatalf("exit %d, stderr %q: want 2 naming the key and the fix", code, stderr)
		}
		noSync := filepath.Join(t.TempDir(), "nosync.toml")
		writeFile(t, noSync, strings.Replace(readFile(t, cfg), "x.db", "x.db?_sync=OFF", 1))
		_, stderr, code = runFerry(t, "serve", "--config", noSync)
		if code != 2 || !strings.Contains(stderr, "store.url") || !strings.Contains(stderr, "synchronous is 0") {
			t.Fatalf("exit %d, stderr %q: want 2 naming store.url and the setting", code, stderr)
		}
		_, stderr, code = runFerry(t, "serve", "--config", cfg, "--role", "both")
		if code != 2 || !strings.Contains(stderr, "--role") {
			t.Fatalf("exit %d, stderr %q: want 2 for a bad flag", code, stderr)
		}
		// A store.url pgx cannot parse is a config error, its password
		// unsaid.
		badURL := filepath.Join(t.TempDir(), "badurl.toml")
		writeFile(t, badURL, strings.Replace(readFile(t, cfg), `"sqlite:`, `"postgres://ferry:SEKRET@127.0.0.1:notaport/ferry?x=`, 1))
		_, stderr, code = runFerry(t, "serve", "--config", badURL)
		if code != 2 || !strings.Contains(stderr, "store.url: ") || !strings.Contains(stderr, "invalid port") || strings.Contains(stderr, "SEKRET") {
			t.Fatalf("exit %d, stderr %q: want 2 naming store.url and the reason, not the password", code, stderr)
		}
		// --listen is held to http.listen's rules, as the file is.
		_, stderr, code = runFerry(t, "serve", "--config", cfg, "--listen", "nohost")
		if code != 2 || !strings.Contains(stderr, `http.listen (from --listen): "nohost" is not host:port`) {
			t.Fatalf("--listen nohost: exit %d, stderr %q: want 2 naming http.listen", code, stderr)
		}
		// A port another process holds names the key and the likely cause.
		taken := testhttp.Listen(t)
		_, stderr, code = runFerry(t, "serve", "--config", cfg, "--listen", taken.Addr().String())
		if code != 1 || !strings.Contains(stderr, "http.listen "+taken.Addr().String()) || !strings.Contains(stderr, "another process holds that port (a ferry serve already running with this config?): stop it, or give http.listen (or --listen) another port") {
			t.Fatalf("--listen on a taken port: exit %d, stderr %q: want 1 naming http.listen and the fix", code, stderr)
		}
		admin := freeAddr(t)
		fixedAdmin := filepath.Join(t.TempDir(), "admin.toml")
		writeFile(t, fixedAdmin, strings.Replace(readFile(t, cfg), "[admin]\nlisten = \"127.0.0.1:0\"", "[admin]\nlisten = \""+admin+"\"", 1))
		_, stderr, code = runFerry(t, "serve", "--config", fixedAdmin, "--listen", admin)
		if code != 2 || !strings.Contains(stderr, "admin.listen: "+admin+" is also http.listen ("+admin+", from --listen)") || !strings.Contains(stderr, "give --listen or admin.listen another port") {
			t.Fatalf("--listen as admin.listen: exit %d, stderr %q: want 2 naming admin.listen and --listen", code, stderr)
		}
	})
}

// TestServeDashboardReplaysOnlyConfiguredSources: serve's dashboard takes
// the config's sources as the ones a worker runs, so a source taken out of
// the config is offered no replay, and one posted anyway leaves its event
// dead rather than pending for good.
func TestServeDashboardReplaysOnlyConfiguredSources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "ferry.db")
	st := teststore.SQLiteAt(t, dbPath, nil)
	id := deadEvent(t, st, "retired", "evt_r", "gone")
	_, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
	p := startServe(t, writeConfig(t, "sqlite:"+dbPath, appSrv.URL, "")) // stripe alone
	if code, body := testhttp.Get(t, "http://"+p.admin+"/ui/"); code != 200 || !strings.Contains(body, "retired") || strings.Contains(body, "/ui/replay?source=retired") {
		t.Fatalf("/ui/: %d, want the retired source listed with no replay offered\n%s", code, body)
	}
	req, err := http.NewRequest("POST", "http://"+p.admin+"/ui/events/"+fmt.Sprint(id)+"/replay", strings.NewReader("confirm=yes"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if code, body := testhttp.Do(t, req); code != 200 || !strings.Contains(body, "not replayed") {
		t.Fatalf("replay posted anyway: %d\n%s", code, body)
	}
	if e, err := st.EventGet(ctx, &ferry.EventGetParams{ID: id}); err != nil || e.State != ferry.StateDead {
		t.Fatalf("the retired source's event: %+v, %v; want dead", e, err)
	}
}

// serve's admin listener knows a generic HMAC source's config: its
// dashboard redacts the signature header named as the sender chose (as
// ferry events show does), and /metrics starts a verified series at zero
// for each of its secrets, so increase() sees the old one's first use.
func TestServeAdminKnowsAnHMACSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "ferry.db")
	st := teststore.SQLiteAt(t, dbPath, nil)
	res, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "partner", EventID: "p_1", Payload: []byte(`{}`),
		Headers: http.Header{"X-Partner-Check": {"SEKRET"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusServiceUnavailable })
	p := startServe(t, writeServeConfig(t, "sqlite:"+dbPath, partnerSource+fmt.Sprintf(`[source.forward]
url = %q
secret = %q
`, appSrv.URL, forwardSecret)))
	code, body := testhttp.Get(t, "http://"+p.admin+"/ui/events/"+fmt.Sprint(res.ID))
	if code != 200 || !strings.Contains(body, "X-Partner-Check") || strings.Contains(body, "SEKRET") {
		t.Fatalf("the event page: %d, want X-Partner-Check listed and its value redacted\n%s", code, body)
	}
	_, metrics := testhttp.Get(t, "http://"+p.admin+"/metrics")
	for _, series := range []string{`ferry_verified_total{secret="0",source="partner"} 0`, `ferry_verified_total{secret="1",source="partner"} 0`} {
		if !strings.Contains(metrics, series+"\n") {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// TestServeAdminSurface: the public listener serves only what a provider
// needs; the dashboard, its actions and /metrics answer on the admin
// listener alone, which needs credentials off loopback.
func TestServeAdminSurface(t *testing.T) {
	t.Parallel()

	t.Run("PublicListenerBehindAProxyServesNoAdminPath", func(t *testing.T) {
		t.Parallel()
		_, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		p := startServe(t, writeConfig(t, "sqlite:"+dbPath, appSrv.URL, ""))
		sendStripeOK(t, p.addr, "evt_private")
		st := teststore.OpenSQLite(t, dbPath, nil)
		waitDone(t, st, "evt_private")
		id := fmt.Sprint(eventState(t, st, "evt_private").ID)

		// The admin paths exist, on the admin listener.
		for _, path := range []string{"/ui/events/" + id, "/metrics"} {
			code, body := testhttp.Get(t, "http://"+p.admin+path)
			if code != 200 || (path != "/metrics" && !strings.Contains(body, "evt_private")) {
				t.Fatalf("admin listener %s: %d", path, code)
			}
		}

		target, err := url.Parse("http://" + p.addr)
		if err != nil {
			t.Fatal(err)
		}
		for name, rewrite := range map[string]func(*httputil.ProxyRequest){
			"SetURL":               func(r *httputil.ProxyRequest) { r.SetURL(target) },
			"SetURL+SetXForwarded": func(r *httputil.ProxyRequest) { r.SetURL(target); r.SetXForwarded() },
		} {
			proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: rewrite})
			defer proxy.Close()
			send := func(method, path, form string) (int, string) {
				req, err := http.NewRequest(method, proxy.URL+path, strings.NewReader(form))
				if err != nil {
					t.Fatal(err)
				}
				if form != "" {
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				req.Header.Set("Sec-Fetch-Site", "same-origin")
				return testhttp.Do(t, req)
			}
			if code, _ := send("GET", "/healthz", ""); code != 200 {
				t.Fatalf("%s: /healthz through the proxy: %d", name, code)
			}
			if code := sendStripe(t, strings.TrimPrefix(proxy.URL, "http://"), "evt_via_proxy_"+strings.ReplaceAll(name, "+", "_")); code != 200 {
				t.Fatalf("%s: a delivery through the proxy: %d", name, code)
			}
			for _, r := range []struct{ method, path, form string }{
				{"GET", "/ui", ""}, {"GET", "/ui/", ""}, {"GET", "/ui/events/" + id, ""}, {"GET", "/ui/?state=done", ""},
				{"GET", "/ui/login", ""}, {"GET", "/ui/static/ferry.css", ""}, {"GET", "/metrics", ""},
				{"POST", "/ui/events/" + id + "/replay", ""}, {"POST", "/ui/replay", "source=stripe"},
				{"POST", "/ui/login", "token=x"}, {"POST", "/ui/logout", ""},
			} {
				code, body := send(r.method, r.path, r.form)
				if code != http.StatusNotFound || strings.Contains(body, "evt_private") {
					t.Errorf("%s: anonymous %s %s on the public listener: %d, want 404", name, r.method, r.path, code)
				}
			}
		}
		if ev := eventState(t, st, "evt_private"); ev.State != ferry.StateDone || !ev.RequeuedAt.IsZero() {
			t.Errorf("the event was replayed through the public listener: %s, requeued at %v", ev.State, ev.RequeuedAt)
		}
	})

	t.Run("AdminOffLoopbackNeedsCredentials", func(t *testing.T) {
		t.Parallel()
		cfg := writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), "http://127.0.0.1:1", "")
		exposed := strings.Replace(readFile(t, cfg), "[admin]\nlisten = \"127.0.0.1:0\"", "[admin]\nlisten = \"0.0.0.0:0\"", 1)
		bad := filepath.Join(t.TempDir(), "exposed.toml")
		writeFile(t, bad, exposed)
		_, stderr, code := runFerry(t, "serve", "--config", bad, "--role", "receiver")
		if code != 2 || !strings.Contains(stderr, "admin.listen") || !strings.Contains(stderr, `admin.token = "${FERRY_ADMIN_TOKEN}"`) {
			t.Fatalf("admin on 0.0.0.0 without credentials: exit %d, stderr %q; want 2 naming the key and the fix", code, stderr)
		}

		short := filepath.Join(t.TempDir(), "short.toml")
		writeFile(t, short, strings.Replace(exposed, "[admin]\n", "[admin]\ntoken = \"guessable\"\n", 1))
		_, stderr, code = runFerry(t, "serve", "--config", short, "--role", "receiver")
		if code != 2 || !strings.Contains(stderr, "admin.token: is shorter than 16 characters") || strings.Contains(stderr, "guessable") {
			t.Fatalf("admin on 0.0.0.0 with a short token: exit %d, stderr %q; want 2 naming the key, not the token", code, stderr)
		}

		withToken := filepath.Join(t.TempDir(), "token.toml")
		writeFile(t, withToken, strings.Replace(exposed, "[admin]\n", "[admin]\ntoken = \"${FERRY_ADMIN_TOKEN}\"\ntoken_name = \"oncall\"\n", 1))
		p := startServeWith(t, ferryBin, []string{"FERRY_ADMIN_TOKEN=adm1n-s3cret-0123456789"}, withToken, "--role", "receiver", "--listen", "0.0.0.0:0")
		if !strings.Contains(p.log(), "admin.public_url is not https") {
			t.Errorf("admin on 0.0.0.0 with no https public_url: no warning that it runs in the clear\n%s", p.log())
		}
		_, port, err := net.SplitHostPort(p.admin)
		if err != nil {
			t.Fatal(err)
		}
		admin := "http://127.0.0.1:" + port // a loopback peer and a loopback Host: neither grants anything
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		status := func(path, token string) int {
			req, err := http.NewRequest("GET", admin+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Forwarded-For", "127.0.0.1")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode
		}
		if code := status("/ui/", ""); code != http.StatusSeeOther {
			t.Errorf("anonymous /ui/ on the admin listener: %d, want 303 to the login", code)
		}
		if code := status("/metrics", ""); code != http.StatusUnauthorized {
			t.Errorf("anonymous /metrics: %d, want 401", code)
		}
		if code := status("/ui/", "adm1n-s3cret-0123456789"); code != 200 {
			t.Errorf("/ui/ with the token: %d", code)
		}
		if code := status("/metrics", "adm1n-s3cret-0123456789"); code != 200 {
			t.Errorf("/metrics with the token: %d", code)
		}
	})
}

// waitReadyzFails waits, 30 s at the most, until p's /readyz answers 503,
// as it does from a stop signal on; the listener must still answer.
func waitReadyzFails(t *testing.T, p *serveProc) {
	t.Helper()
	waitFor(t, 30*time.Second, "/readyz to fail", func() bool {
		resp, err := http.Get("http://" + p.addr + "/readyz")
		if err != nil {
			t.Fatalf("/readyz while stopping: %v\n%s", err, p.log())
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServeWithoutMigratingNeedsACurrentSchema: serve that does not
// migrate refuses a schema that lacks a migration (exit 2, naming the
// fix) rather than serving a /readyz that passes while every delivery
// fails, and starts on a schema that lacks none.
func TestServeWithoutMigratingNeedsACurrentSchema(t *testing.T) {
	t.Parallel()
	refused := func(t *testing.T, cfg string, fix string, args ...string) {
		t.Helper()
		stderr, code := serveRefused(t, cfg, args...)
		if code != exitUsage || !strings.Contains(stderr, "the store's schema lacks ") || !strings.Contains(stderr, "(001_initial, ") ||
			!strings.Contains(stderr, "run `ferry migrate`, or "+fix+"\n") || strings.Contains(stderr, "ferry: serving") {
			t.Errorf("serve %v on an empty store: exit %d, stderr:\n%s\nwant %d, the pending migrations and %q, before serving", args, code, stderr, exitUsage, fix)
		}
	}
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ferry.db")
		cfg := writeConfig(t, "sqlite:"+path, "http://127.0.0.1:1/hooks", "")
		// A missing file is a mistyped store.url: refused, and not made.
		_, stderr, code := runFerry(t, "serve", "--config", cfg, "--no-migrate")
		if _, err := os.Stat(path); code != exitUsage || !strings.Contains(stderr, "store.url") || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("serve --no-migrate on a missing file: exit %d (file: %v), stderr:\n%s\nwant %d naming store.url, and no file", code, err, stderr, exitUsage)
		}
		writeFile(t, path, "") // an empty SQLite database
		refused(t, cfg, "drop --no-migrate", "--no-migrate")
		off := filepath.Join(t.TempDir(), "off.toml")
		writeFile(t, off, strings.Replace(readFile(t, cfg), "[store]\n", "[store]\nmigrate = false\n", 1))
		refused(t, off, "set store.migrate = true")

		if _, stderr, code := runFerry(t, "migrate", "--config", off); code != 0 {
			t.Fatalf("migrate: exit %d: %s", code, stderr)
		}
		startServe(t, off, "--no-migrate").terminate(t)
	})
	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		refused(t, writeConfig(t, pgtest.SchemaURL(t), "http://127.0.0.1:1/hooks", ""), "drop --no-migrate", "--no-migrate")
	})
}

// serveRefused runs `ferry serve --config cfg args...` and returns its
// stderr and exit code. A serve that starts is stopped after 30s: it did
// not refuse, and its code is then -1.
func serveRefused(t *testing.T, cfg string, args ...string) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	cmd := exec.CommandContext(ctx, ferryBin, append([]string{"serve", "--config", cfg}, args...)...)
	cmd.Stderr = &out
	_ = cmd.Run()
	return out.String(), cmd.ProcessState.ExitCode()
}

// A role that may use Ferry's schema but not its tables stops serve at
// start, before it migrates (exit 2, naming store.url, what it lacks and
// the GRANTs), and is a doctor fail with that fix: before, it exited 1 on
// the migration ledger, and a role that could read but not write passed
// /readyz and doctor while every delivery got 503. With the GRANTs, serve
// starts.
func TestServeRefusesARoleThatCannotWrite(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Schema(t)
	teststore.PostgresOn(t, pool, nil)
	storeURL, role := pgtest.Role(t, schema, "serve", "GRANT USAGE ON SCHEMA "+schema+" TO %s")
	// The owner migrated; the role serves, and migrates at start as serve
	// does by default: Ping's check comes first.
	cfg := writeConfig(t, storeURL, "http://127.0.0.1:1/hooks", "")
	grant := "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE " + schema + ".ferry_event TO " + role
	stderr, code := serveRefused(t, cfg)
	if code != exitUsage || !strings.Contains(stderr, "store.url: ") || !strings.Contains(stderr, "lacks SELECT on ferry_event, INSERT on ferry_event") ||
		!strings.Contains(stderr, grant) || strings.Contains(stderr, "ferry: serving") {
		t.Errorf("serve as a role with no GRANT: exit %d, stderr:\n%s\nwant %d naming store.url, INSERT on ferry_event and %q, before serving", code, stderr, exitUsage, grant)
	}
	if r, code := doctorJSON(t, cfg); code != exitProblems || !hasFinding(r, "fail", "lacks SELECT on ferry_event, INSERT on ferry_event") {
		t.Errorf("doctor as a role with no GRANT: exit %d, findings %+v; want %d and a fail naming what it lacks", code, r.Findings, exitProblems)
	}

	if _, err := pool.Exec(context.Background(), "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "+schema+" TO "+role+
		"; GRANT USAGE ON ALL SEQUENCES IN SCHEMA "+schema+" TO "+role); err != nil {
		t.Fatal(err)
	}
	// The GRANTs are a receiver's: the worker's archive maintenance, which
	// only the owner may do, fails as an ERROR that names the fix.
	p := startServe(t, cfg)
	waitFor(t, 30*time.Second, "the archive maintenance's ERROR", func() bool {
		for line := range strings.SplitSeq(p.log(), "\n") {
			if strings.Contains(line, `"level":"ERROR","msg":"ferry: archive maintenance failed"`) && strings.Contains(line, "run the workers") {
				return true
			}
		}
		return false
	})
	p.terminate(t)
}

// The public listener's timeouts outlast the longest receipt the config
// allows: a connection cut before the answer loses it.
func TestPublicServerTimeoutsCoverAReceipt(t *testing.T) {
	t.Parallel()
	cfg := config.HTTP{BodyTimeout: config.Duration{Duration: 20 * time.Second}, StoreTimeout: config.Duration{Duration: 30 * time.Second}}
	s := newPublicServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler), cfg)
	if want := cfg.BodyTimeout.Duration + cfg.StoreTimeout.Duration; s.WriteTimeout <= want {
		t.Errorf("WriteTimeout %v, want more than body_timeout + store_timeout, %v", s.WriteTimeout, want)
	}
	if want := s.ReadHeaderTimeout + cfg.BodyTimeout.Duration; s.ReadTimeout <= want {
		t.Errorf("ReadTimeout %v, want more than ReadHeaderTimeout + body_timeout, %v", s.ReadTimeout, want)
	}
}

// A start that cannot bind admin.listen stops before anything claims: a
// port in use, restarted in a loop, must not take and release every due
// event on each try (its attempts, and a forward it may have sent).
func TestServeAdminPortInUseClaimsNothing(t *testing.T) {
	t.Parallel()
	held := testhttp.Listen(t)
	app, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
	dbPath := filepath.Join(t.TempDir(), "ferry.db")
	st := teststore.SQLiteAt(t, dbPath, nil)
	ids := []string{"evt_held_1", "evt_held_2", "evt_held_3"}
	for _, id := range ids {
		if _, err := st.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t, "sqlite:"+dbPath, appSrv.URL, "")
	writeFile(t, cfg, strings.Replace(readFile(t, cfg), "[admin]\nlisten = \"127.0.0.1:0\"", "[admin]\nlisten = \""+held.Addr().String()+"\"", 1))

	_, stderr, code := runFerry(t, "serve", "--config", cfg, "--role", "all")
	if code == 0 || !strings.Contains(stderr, "admin.listen "+held.Addr().String()) {
		t.Fatalf("serve with admin.listen in use: exit %d, stderr %q; want a failure naming admin.listen", code, stderr)
	}
	for _, id := range ids {
		ev := eventState(t, st, id)
		if ev == nil {
			t.Fatalf("%s: not in the store", id)
		}
		if got := outcomes(t, st, ev.ID); ev.State != ferry.StatePending || ev.Attempt != 0 || len(got) != 0 {
			t.Errorf("%s is %s at attempt %d with ledger %v; want pending, never attempted", id, ev.State, ev.Attempt, got)
		}
	}
	if n := app.count(); n != 0 {
		t.Errorf("the app got %d requests from a start that failed", n)
	}
}

// A SQLite path the store cannot use stops the start as a config mistake
// (exit 2), naming store.url and the fix, not with the driver's bare
// "unable to open database file" (exit 1).
func TestServeRefusesAnUnusableSQLitePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for path, want := range map[string]string{
		filepath.Join(dir, "no", "such", "x.db"): "does not exist: create it",
		"cfgfix-no-such-dir/x.db":                "does not exist: create it (the store makes its file, not the directories above it), or fix the path (relative to the working directory ",
		dir:                                      "is a directory: name a file in it",
		filepath.Join(dir, "ro.db") + "?_pragma=query_only(1)": "query_only is on",
	} {
		cfg := writeConfig(t, "sqlite:"+path, "http://127.0.0.1:1/hooks", "")
		_, stderr, code := runFerry(t, "serve", "--config", cfg)
		if code != exitUsage || !strings.Contains(stderr, "store.url: ") || !strings.Contains(stderr, want) {
			t.Errorf("serve on sqlite:%s: exit %d, stderr %q; want %d naming store.url and %q", path, code, stderr, exitUsage, want)
		}
	}
}

// A store.url that sets a default isolation above read committed stops the
// start (exit 2) naming store.url and the fix, as a non-durable one does:
// opened, every claim and completion would fail, and /readyz answer 503
// for ever.
func TestServeRefusesAStoreURLNotReadCommitted(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, pgtest.SchemaURL(t)+"&default_transaction_isolation=serializable", "http://127.0.0.1:1", "")
	// A serve that starts is stopped at a ceiling only a start would reach.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ferryBin, "serve", "--config", cfg)
	var e strings.Builder
	cmd.Stderr = &e
	_ = cmd.Run()
	code, stderr := cmd.ProcessState.ExitCode(), e.String()
	for _, want := range []string{"store.url", `default_transaction_isolation = "serializable"`, "remove default_transaction_isolation from the URL"} {
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("serve with a serializable store.url: exit %d, stderr %q; want 2 saying %q", code, stderr, want)
		}
	}
}

// SIGTERM while the store's server takes the connection and never answers
// (a slow or stuck PostgreSQL at start) is a stop, as at any other moment
// of the start: exit 0, not a failed start.
func TestServeStoppedWhileConnecting(t *testing.T) {
	t.Parallel()
	addr, taken := neverAnswers(t)
	cfg := writeCLIConfig(t, "postgres://ferry@"+addr+"/test?sslmode=disable", "")
	p := launchServe(t, ferryBin, nil, cfg, "--role", "receiver", "--listen", "127.0.0.1:0")
	select {
	case <-taken:
	case <-p.exited:
		t.Fatalf("exited before connecting: %v\n%s", p.err, p.log())
	}
	p.terminate(t)
	if p.err != nil {
		t.Errorf("SIGTERM while connecting to the store: %v, want exit 0\n%s", p.err, p.log())
	}
}
