package ferryhttp

import (
	"context"
	"time"
)

// SetRefusalWindow sets how long the refusal log's windows last from the
// next one on.
func (a *Admin) SetRefusalWindow(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refusalWindow = d
}

// EndRefusalWindow ends the open refusal window now, as its timer would.
func (a *Admin) EndRefusalWindow() {
	a.mu.Lock()
	t := a.refusalTimer
	a.mu.Unlock()
	if t != nil && t.Stop() {
		a.refusalWindowEnd()
	}
}

// ClientIPHeaders are the client-address headers a credential-less admin
// refuses, for the test that docs/security.md names them all.
var ClientIPHeaders = clientIPHeaders

// BaseTransport is the forwarder's transport before its own settings.
var BaseTransport = baseTransport

// SetClock sets the clock /readyz times its store check's reuse by.
func (h *Health) SetClock(now func() time.Time) { h.now = now }

// StoreErr is the store check /readyz answers by.
func (h *Health) StoreErr(ctx context.Context) error { return h.storeErr(ctx) }
