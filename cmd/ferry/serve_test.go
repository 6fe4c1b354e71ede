package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/provider"
	"github.com/ferry-inbox/ferry/sqlite"
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

func TestServe(t *testing.T) {
	t.Parallel()

	t.Run("ForwardsSignedAndRetriesUntil2xx", func(t *testing.T) {
		t.Parallel()
		app, appSrv := newDownstream(t, func(n int, _ *http.Request) int {
			if n <= 2 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		})
		dbPath := filepath.Join(t.TempDir(), "ferry.db")
		p := startServe(t, writeConfig(t, "sqlite:"+dbPath, appSrv.URL+"/hooks", ""))
		if code := sendStripe(t, p.addr, "evt_fwd"); code != http.StatusOK {
			t.Fatalf("delivery answered %d", code)
		}
		st, err := sqlite.Open(dbPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		waitFor(t, 30*time.Second, "the event to be done", func() bool {
			ev := eventState(t, st, "evt_fwd")
			return ev != nil && ev.State == ferry.StateDone
		})

		if n := app.count(); n != 3 {
			t.Fatalf("app got %d requests, want 3 (500, 500, 200)", n)
		}
		verifier, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{forwardSecret}})
		if err != nil {
			t.Fatal(err)
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
			if _, err := verifier.Verify(h, app.bodies[i]); err != nil {
				t.Errorf("request %d signature: %v", i+1, err)
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

	t.Run("SIGKILLedWorkersEventIsReclaimedWithinTTL", func(t *testing.T) {
		t.Parallel()
		pool, schema := pgtest.Schema(t)
		st := postgres.New(pool, nil)
		handling := make(chan struct{})
		var once sync.Once
		_, appSrv := newDownstream(t, func(n int, r *http.Request) int {
			if n == 1 {
				once.Do(func() { close(handling) })
				<-r.Context().Done() // the first worker hangs in the work until it dies
			}
			return http.StatusOK
		})
		// Long enough that a busy machine's stalls cannot lapse the first
		// worker's lease before it is killed.
		const ttl = 5 * time.Second
		cfg := writeConfig(t, pgtest.ConnString(schema), appSrv.URL, `lease_ttl = "5s"`+"\n"+`heartbeat = "1s"`)
		first := startServe(t, cfg)
		if code := sendStripe(t, first.addr, "evt_kill"); code != http.StatusOK {
			t.Fatalf("delivery answered %d", code)
		}
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
		handling := make(chan struct{})
		var once sync.Once
		_, appSrv := newDownstream(t, func(_ int, r *http.Request) int {
			once.Do(func() { close(handling) })
			<-r.Context().Done() // slower than the grace period
			return http.StatusOK
		})
		cfg := writeConfig(t, pgtest.ConnString(schema), appSrv.URL, `shutdown_grace = "500ms"`)
		p := startServe(t, cfg)
		if code := sendStripe(t, p.addr, "evt_term"); code != http.StatusOK {
			t.Fatalf("delivery answered %d", code)
		}
		<-handling
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Fatal("ferry serve did not exit after SIGTERM")
		}
		var exitErr *exec.ExitError
		if errors.As(p.err, &exitErr) {
			t.Fatalf("exit code %d after SIGTERM, want 0", exitErr.ExitCode())
		}
		claims, err := st.EventClaimMany(context.Background(), &ferry.EventClaimManyParams{Owner: "another-instance", Limit: 10, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) != 1 || claims[0].Event.EventID != "evt_term" {
			t.Fatalf("released event not claimable at once: %d claims", len(claims))
		}
		ledger := outcomes(t, st, claims[0].Event.ID)
		if !strings.HasPrefix(ledger[0], "released@") {
			t.Errorf("ledger = %v, want the first attempt released", ledger)
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
			if code := sendStripe(t, receiver.addr, fmt.Sprint("evt_split_", i)); code != http.StatusOK {
				t.Fatalf("delivery answered %d", code)
			}
		}
		worker := startServe(t, cfg, "--role", "worker")
		st, err := sqlite.Open(dbPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
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
		_, stderr, code = runFerry(t, "serve", "--config", cfg, "--role", "both")
		if code != 2 || !strings.Contains(stderr, "--role") {
			t.Fatalf("exit %d, stderr %q: want 2 for a bad flag", code, stderr)
		}
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
