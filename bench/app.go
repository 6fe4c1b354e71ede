package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// exampleAppAddr is where examples/ferry.toml forwards: the user's app.
const exampleAppAddr = "127.0.0.1:3000"

// app is the user's app that `ferry serve` forwards to: it answers each
// forward after hold (0: at once) and records when each event first arrived
// (the moment its request reached the handler).
type app struct {
	addr string // host:port it listens on
	hold time.Duration
	srv  *http.Server

	mu       sync.Mutex
	arrived  map[string]time.Time
	inFlight int
	repeats  int // forwards of an event that had already arrived
}

// startApp listens on exampleAppAddr if it is free, else on a free port
// (exampleConfig then points the forward URLs there). It speaks HTTP/1.1 and
// HTTP/2 without TLS (prior knowledge), as a Go app can.
func startApp(hold time.Duration) (*app, error) {
	ln, err := net.Listen("tcp", exampleAppAddr)
	if err != nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	a := &app{addr: ln.Addr().String(), hold: hold, arrived: map[string]time.Time{}}
	a.srv = &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second}
	a.srv.Protocols = new(http.Protocols)
	a.srv.Protocols.SetHTTP1(true)
	a.srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	id := r.Header.Get("Ferry-Event-Id")
	a.mu.Lock()
	if _, seen := a.arrived[id]; seen {
		a.repeats++
	} else {
		a.arrived[id] = at
	}
	a.inFlight++
	a.mu.Unlock()
	_, _ = io.Copy(io.Discard, r.Body)
	if a.hold > 0 {
		select {
		case <-time.After(a.hold):
		case <-r.Context().Done():
		}
	}
	a.mu.Lock()
	a.inFlight--
	a.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (a *app) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
}

// arrivedAt returns when id first arrived.
func (a *app) arrivedAt(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.arrived[id]
	return t, ok
}

// count returns how many distinct events have arrived.
func (a *app) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.arrived)
}

// repeatCount returns how many forwards were of an event that had already
// arrived.
func (a *app) repeatCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.repeats
}

// waitAll waits until every id in ids has arrived, up to limit, and returns
// the latest arrival among them.
func (a *app) waitAll(ctx context.Context, ids []string, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		var last time.Time
		missing := 0
		a.mu.Lock()
		for _, id := range ids {
			t, ok := a.arrived[id]
			if !ok {
				missing++
			} else if t.After(last) {
				last = t
			}
		}
		a.mu.Unlock()
		if missing == 0 {
			return last, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d of %d accepted events had not reached the app %s later (-drain-max)", missing, len(ids), limit)
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return time.Time{}, ctx.Err()
		}
	}
}

// exampleConfig is examples/ferry.toml with only store.url and http.listen
// changed; if the app could not have the example's address, the forward URLs
// point at the app's instead (same paths). It returns the config text and the
// Stripe source's secret, to sign deliveries with.
func exampleConfig(storeURL, appAddr string) (text, stripeSecret string, err error) {
	raw, err := os.ReadFile(filepath.Join("..", "examples", "ferry.toml"))
	if err != nil {
		return "", "", err
	}
	var out []string
	section, source := "", ""
	var changed []string
	for _, line := range strings.Split(string(raw), "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "["):
			section = strings.Trim(t, "[]")
		case section == "store" && strings.HasPrefix(t, "url"):
			line = "url = " + strconv.Quote(storeURL)
			changed = append(changed, "store.url")
		case section == "http" && strings.HasPrefix(t, "listen"):
			line = `listen = "127.0.0.1:0"`
			changed = append(changed, "http.listen")
		case section == "source" && strings.HasPrefix(t, "name"):
			source = t
		case section == "source" && strings.Contains(source, `"stripe"`) && strings.HasPrefix(t, "secrets") && stripeSecret == "":
			if i, j := strings.Index(t, `["`), strings.Index(t, `"]`); i >= 0 && j > i {
				stripeSecret = t[i+2 : j]
			}
		case section == "source.forward" && appAddr != exampleAppAddr:
			line = strings.ReplaceAll(line, exampleAppAddr, appAddr)
		}
		out = append(out, line)
	}
	if len(changed) != 2 || stripeSecret == "" {
		return "", "", errors.New("examples/ferry.toml: no [store] url, [http] listen or stripe source secret found; the e2e benchmarks read them from it")
	}
	return strings.Join(out, "\n"), stripeSecret, nil
}

// serveExample starts `ferry serve` on the example config for storeURL,
// forwarding to a, and returns it with the delivery URL and signing secret.
func serveExample(ctx context.Context, o *options, name, storeURL string, a *app) (c *child, target, secret string, err error) {
	text, secret, err := exampleConfig(storeURL, a.addr)
	if err != nil {
		return nil, "", "", err
	}
	c, err = startServe(ctx, o.tmp, name, text, "all")
	if err != nil {
		return nil, "", "", err
	}
	return c, "http://" + c.addr + "/webhooks/stripe", secret, nil
}
