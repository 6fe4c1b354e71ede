package ferryhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-inbox/ferry"
)

// Pinger is a store that can say whether it is reachable. postgres.Store and
// sqlite.Store are.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Health serves /healthz (the process is up) and /readyz (the store answers
// within two seconds, does not refuse writes and is not misconfigured, and
// the process is neither starting nor shutting down), for load balancers
// and orchestrators.
//
// /readyz is on the public listener, so anyone can ask it: the store is
// checked once at a time and its answer reused for StoreCheckReuse, so a
// flood of probes costs the store one check a second, not one each.
type Health struct {
	Store    Pinger
	starting atomic.Bool
	stopping atomic.Bool

	mu       sync.Mutex
	checked  time.Time     // when err was found; zero before the first check
	err      error         // the last check's
	checking chan struct{} // closed when the running check ends; nil when none runs
	started  time.Time     // when the running check started
	now      func() time.Time
}

// StoreCheckReuse is how long /readyz answers with the store's last check
// before it checks again.
const StoreCheckReuse = time.Second

// storeCheckTimeout is how long a store check may take: a probe waits no
// longer for it, and a check still running after it (a store that ignores
// its context) is given up on, so that the next probe checks anew.
const storeCheckTimeout = 2 * time.Second

// errStoreCheckTimeout is a check that did not end within storeCheckTimeout.
var errStoreCheckTimeout = errors.New("ferryhttp: the store check did not end in time")

func (h *Health) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

// storeErr is the store's last check if it is newer than StoreCheckReuse;
// else the running check's, or a new one's. A probe waits for it no longer
// than its own context lasts, nor than storeCheckTimeout; the check runs
// on, for the next probes, with the probe's values but not its
// cancellation.
func (h *Health) storeErr(ctx context.Context) error {
	h.mu.Lock()
	now := h.clock()
	if !h.checked.IsZero() && now.Sub(h.checked) < StoreCheckReuse {
		defer h.mu.Unlock()
		return h.err
	}
	if h.checking == nil || now.Sub(h.started) >= storeCheckTimeout {
		h.checking, h.started = make(chan struct{}), now
		go h.check(context.WithoutCancel(ctx), h.checking)
	}
	done := h.checking
	h.mu.Unlock()
	timer := time.NewTimer(storeCheckTimeout)
	defer timer.Stop()
	select {
	case <-done:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.err
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return errStoreCheckTimeout
	}
}

// check pings the store and, unless a later check has replaced it, keeps
// the answer; a panic in Ping is a failed check, not a crash.
func (h *Health) check(ctx context.Context, done chan struct{}) {
	var err error
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("ferryhttp: the store check panicked: %v", p)
		}
		h.mu.Lock()
		if h.checking == done {
			h.err, h.checked, h.checking = err, h.clock(), nil
		}
		h.mu.Unlock()
		close(done)
	}()
	ctx, cancel := context.WithTimeout(ctx, storeCheckTimeout)
	defer cancel()
	err = h.Store.Ping(ctx)
}

// Starting makes /readyz fail, and Gate hold every other request off, until
// Started: the process answers /healthz while it migrates and prepares, so
// an orchestrator does not restart it for taking long.
func (h *Health) Starting() { h.starting.Store(true) }

// Started ends Starting.
func (h *Health) Started() { h.starting.Store(false) }

// Gate serves next once started. Before, it answers what is not /healthz or
// /readyz as the receiver answers when it cannot store: 503 starting, with
// Retry-After (as ReceiverOptions.RetryAfter, DefaultRetryAfter if not
// positive).
func (h *Health) Gate(next http.Handler, retryAfter time.Duration) http.Handler {
	if retryAfter <= 0 {
		retryAfter = DefaultRetryAfter
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.starting.Load() || r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		writeAnswer(w, answerStarting, retryAfter)
	})
}

// Stopping makes /readyz fail from now on, so traffic moves away before the
// listener closes.
func (h *Health) Stopping() { h.stopping.Store(true) }

// Register mounts both endpoints on mux.
func (h *Health) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if h.stopping.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if h.starting.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		// A read-only store (a standby after failover) fails too: every
		// delivery here would get 503, and an instance still pointed at it
		// should lose its traffic to one that can write.
		// So does one whose sessions run with a setting Ferry's
		// statements fail under, or as a role without the GRANTs they
		// need (ferry.ErrMisconfigured).
		if err := h.storeErr(r.Context()); errors.Is(err, ferry.ErrReadOnly) {
			http.Error(w, "store read-only", http.StatusServiceUnavailable)
			return
		} else if errors.Is(err, ferry.ErrMisconfigured) {
			http.Error(w, "store misconfigured", http.StatusServiceUnavailable)
			return
		} else if err != nil {
			http.Error(w, "store unreachable", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
}
