package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/ferry-inbox/ferry/provider"
)

// runEcho is a stand-in for the user's app: it prints each forwarded event,
// checks Ferry's signature (a forgery is answered 401, as an app that checks
// answers it), and can fail the first attempts of each event to show
// retries with one idempotency key.
func runEcho(ctx context.Context, args []string) error {
	fs := newFlags("echo", "[--listen HOST:PORT] [--secret whsec_...] [--fail-first N]",
		`A stand-in for your app. Prints one line per forwarded event (time, source/event
id, type, attempt, idempotency key, whether Ferry's signature checks out, body
size, the status it answers). With --secret, a signature that does not check out
is answered 401, as your app would, so a wrong forward secret sends the event
dead. It can fail the first attempts of each event so you can watch a retry
keep its idempotency key.`)
	listen := fs.String("listen", "127.0.0.1:3000", "`host:port` to listen on")
	secret := fs.String("secret", "", "the forward secret (whsec_...) to verify Ferry's signature with, answering 401 when it does not check out; unchecked when empty")
	failFirst := fs.Int("fail-first", 0, "answer 500 to the first `N` attempts of each event")
	if err := fs.parseFlagsOnly(args); err != nil {
		return err
	}
	var verify func(http.Header, []byte) error
	if *secret != "" {
		v, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{*secret}})
		if err != nil {
			return usagef("--secret: %v", err)
		}
		verify = func(h http.Header, b []byte) error { _, err := v.Verify(h, b); return err }
	}
	handler := echoHandler(verify, *failFirst, os.Stdout)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Printf("ferry echo: listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// echoHandler is echo's app: one line to out per request, 401 to a
// signature verify refuses (verify nil: unchecked), else 500 to the first
// failFirst attempts of each idempotency key and 200 after.
func echoHandler(verify func(http.Header, []byte) error, failFirst int, out io.Writer) http.Handler {
	var mu sync.Mutex
	seen := map[string]int{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		sig, status := "unchecked", http.StatusOK
		if verify != nil {
			sig = "valid"
			if err := verify(r.Header, body); err != nil {
				sig, status = "INVALID", http.StatusUnauthorized
			}
		}
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock()
		if status == http.StatusOK {
			seen[key]++
			if seen[key] <= failFirst {
				status = http.StatusInternalServerError
			}
		}
		fmt.Fprintf(out, "%s %s/%s type=%s attempt=%s idempotency-key=%s signature=%s bytes=%d -> %d\n",
			time.Now().Format(time.TimeOnly), r.Header.Get("Ferry-Source"), r.Header.Get("Ferry-Event-Id"),
			r.Header.Get("Ferry-Event-Type"), r.Header.Get("Ferry-Attempt"), key, sig, len(body), status)
		w.WriteHeader(status)
	})
}
