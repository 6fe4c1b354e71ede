package ferryhttp

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

// Pinger is a store that can say whether it is reachable. postgres.Store and
// sqlite.Store are.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Health serves /healthz (the process is up) and /readyz (the store answers
// within two seconds and the process is not shutting down), for load
// balancers and orchestrators.
type Health struct {
	Store    Pinger
	stopping atomic.Bool
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
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := h.Store.Ping(ctx); err != nil {
			http.Error(w, "store unreachable", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
}
