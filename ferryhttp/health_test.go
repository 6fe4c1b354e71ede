package ferryhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/storetest"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	serve := func(t *testing.T, h *ferryhttp.Health) *httptest.Server {
		mux := http.NewServeMux()
		h.Register(mux)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv
	}

	t.Run("ready, then stopping", func(t *testing.T) {
		t.Parallel()
		h := &ferryhttp.Health{Store: teststore.SQLite(t, nil)}
		srv := serve(t, h)
		if code, body := testhttp.Get(t, srv.URL+"/healthz"); code != 200 || body != "ok\n" {
			t.Errorf("/healthz = %d %q", code, body)
		}
		if code, body := testhttp.Get(t, srv.URL+"/readyz"); code != 200 || body != "ready\n" {
			t.Errorf("/readyz = %d %q", code, body)
		}
		h.Stopping()
		if code, _ := testhttp.Get(t, srv.URL+"/readyz"); code != 503 {
			t.Errorf("/readyz while stopping = %d, want 503", code)
		}
		if code, _ := testhttp.Get(t, srv.URL+"/healthz"); code != 200 {
			t.Errorf("/healthz while stopping = %d, want 200: the process is still up", code)
		}
	})

	t.Run("starting", func(t *testing.T) {
		t.Parallel()
		h := &ferryhttp.Health{Store: teststore.SQLite(t, nil)}
		h.Starting()
		mux := http.NewServeMux()
		h.Register(mux)
		mux.HandleFunc("/webhooks/", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("stored\n")) })
		srv := httptest.NewServer(h.Gate(mux, 1500*time.Millisecond))
		t.Cleanup(srv.Close)
		if code, _ := testhttp.Get(t, srv.URL+"/healthz"); code != 200 {
			t.Errorf("/healthz while starting = %d, want 200: the process is up", code)
		}
		if code, body := testhttp.Get(t, srv.URL+"/readyz"); code != 503 || body != "starting\n" {
			t.Errorf("/readyz while starting = %d %q, want 503 starting", code, body)
		}
		res, err := http.Post(srv.URL+"/webhooks/stripe", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 503 || res.Header.Get("Retry-After") != "2" || string(body) != `{"error":"starting","status":"unavailable"}`+"\n" {
			t.Errorf("a delivery while starting = %d, Retry-After %q, %q; want 503, 2, starting", res.StatusCode, res.Header.Get("Retry-After"), body)
		}
		h.Started()
		if code, body := testhttp.Get(t, srv.URL+"/readyz"); code != 200 {
			t.Errorf("/readyz once started = %d %q", code, body)
		}
		if code, body := testhttp.Get(t, srv.URL+"/webhooks/stripe"); code != 200 || body != "stored\n" {
			t.Errorf("a delivery once started = %d %q", code, body)
		}
	})

	// A store that answers but cannot write (a standby after failover)
	// is not ready: every delivery would get 503.
	t.Run("store read-only", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ferry.db")
		teststore.SQLiteAt(t, path, nil)
		srv := serve(t, &ferryhttp.Health{Store: teststore.OpenSQLite(t, "file:"+path+"?mode=ro", nil)})
		if code, body := testhttp.Get(t, srv.URL+"/readyz"); code != 503 || body != "store read-only\n" {
			t.Errorf("/readyz with a read-only store = %d %q, want 503 store read-only", code, body)
		}
	})

	// A store whose sessions run with a setting Ferry's statements fail
	// under (PostgreSQL serializable by default) is not ready either.
	t.Run("store misconfigured", func(t *testing.T) {
		t.Parallel()
		srv := serve(t, &ferryhttp.Health{Store: pingErr{fmt.Errorf("postgres: ping: %w: default_transaction_isolation", ferry.ErrMisconfigured)}})
		if code, body := testhttp.Get(t, srv.URL+"/readyz"); code != 503 || body != "store misconfigured\n" {
			t.Errorf("/readyz with a misconfigured store = %d %q, want 503 store misconfigured", code, body)
		}
	})

	t.Run("store unreachable", func(t *testing.T) {
		t.Parallel()
		st := teststore.SQLite(t, nil)
		st.Close()
		srv := serve(t, &ferryhttp.Health{Store: st})
		if code, _ := testhttp.Get(t, srv.URL+"/readyz"); code != 503 {
			t.Errorf("/readyz with a closed store = %d, want 503", code)
		}
		if code, _ := testhttp.Get(t, srv.URL+"/healthz"); code != 200 {
			t.Errorf("/healthz with a closed store = %d, want 200", code)
		}
	})
}

// /readyz is public: a flood of probes costs the store one check per
// StoreCheckReuse, whose answer, ready or not, the others reuse.
func TestReadyzReusesTheStoreCheck(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock()
	store := &countedPings{Pinger: teststore.SQLite(t, nil)}
	h := &ferryhttp.Health{Store: store}
	h.SetClock(clock.Now)
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	probe := func(want int) {
		t.Helper()
		for range 20 {
			if code, body := testhttp.Get(t, srv.URL+"/readyz"); code != want {
				t.Fatalf("/readyz = %d %q, want %d", code, body, want)
			}
		}
	}
	probe(200)
	if got := store.count(); got != 1 {
		t.Errorf("20 probes within StoreCheckReuse checked the store %d times, want 1", got)
	}
	// A failed check is reused alike, and the next one after it finds
	// the store well again.
	store.fail(errors.New("down"))
	clock.Advance(ferryhttp.StoreCheckReuse)
	probe(503)
	store.fail(nil)
	probe(503)
	clock.Advance(ferryhttp.StoreCheckReuse)
	probe(200)
	if got := store.count(); got != 3 {
		t.Errorf("the store was checked %d times across three windows, want 3", got)
	}
}

// A store check that hangs, its context ignored, holds no probe past its
// prober's context nor past the check's timeout, and a probe after that
// checks anew: readiness comes back with the store. A check that panics
// is a failed one.
func TestReadyzHungOrPanickingStoreCheck(t *testing.T) {
	t.Parallel()
	store := &hungPing{started: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(store.release) })
	h := &ferryhttp.Health{Store: store}
	first := make(chan error, 1)
	go func() { first <- h.StoreErr(context.Background()) }()
	<-store.started
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	within(t, "a probe whose context ended", func() {
		if err := h.StoreErr(gone); !errors.Is(err, context.Canceled) {
			t.Errorf("a probe whose context ended: %v, want context.Canceled", err)
		}
	})
	within(t, "the probe that waited for the hung check", func() {
		if err := <-first; err == nil {
			t.Error("the probe that waited for the hung check: nil, want an error")
		}
	})
	within(t, "a probe after the hung check's timeout", func() {
		if err := h.StoreErr(context.Background()); err != nil {
			t.Errorf("a probe after the hung check's timeout: %v, want a new check's nil", err)
		}
	})

	panicky := &ferryhttp.Health{Store: panicPing{}}
	if err := panicky.StoreErr(context.Background()); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("a check that panicked: %v, want its error", err)
	}
}

// within runs f, failing the test if it has not returned after a ceiling
// only a probe stuck for good exceeds.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

// hungPing is a store whose first check hangs until released, whatever
// its context says; the checks after it answer at once.
type hungPing struct {
	started, release chan struct{}
	calls            atomic.Int32
}

func (p *hungPing) Ping(context.Context) error {
	if p.calls.Add(1) == 1 {
		close(p.started)
		<-p.release
	}
	return nil
}

// panicPing is a store whose check panics.
type panicPing struct{}

func (panicPing) Ping(context.Context) error { panic("ping bug") }

// countedPings is a store that counts its checks, and fails them while
// told to.
type countedPings struct {
	ferryhttp.Pinger
	mu  sync.Mutex
	n   int
	err error
}

func (c *countedPings) Ping(ctx context.Context) error {
	c.mu.Lock()
	c.n++
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.Pinger.Ping(ctx)
}

func (c *countedPings) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *countedPings) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

// pingErr is a store whose Ping fails with its error.
type pingErr struct{ err error }

func (p pingErr) Ping(context.Context) error { return p.err }
